//! Products recorded as tapes: European, arithmetic Asian, up-and-out barrier, basket.
