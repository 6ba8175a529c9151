//! Any bytes given to the text reader (and to `read`, which picks the form): no panic, no hang; an
//! accepted tape is valid and canonical, and binary → read and write_text → read give it back.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nablac::format::{read, read_text, write_binary, write_text};

fuzz_target!(|data: &[u8]| {
    let _ = read(data);
    if let Ok(tape) = read_text(data) {
        nablac::verify::verify(tape.clone()).expect("an accepted tape verifies");
        let bin = write_binary(&tape);
        let back = read(&bin).expect("binary reads back");
        assert_eq!(write_binary(&back), bin, "write_binary → read gives the same tape");
        let text = write_text(&tape);
        let again = read(text.as_bytes()).expect("text reads back");
        assert_eq!(write_binary(&again), bin);
        assert_eq!(write_text(&again), text);
    }
});
