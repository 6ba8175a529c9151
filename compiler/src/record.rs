//! The recording API: an active scalar with operator overloading that writes into a recorder.
