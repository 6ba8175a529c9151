//! Reading and writing tapes: the binary form (`.bin`) and the text form (`.ntape`), told apart by content.
