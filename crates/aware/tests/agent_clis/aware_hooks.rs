//! aware hook with the real CLIs (filled below).
