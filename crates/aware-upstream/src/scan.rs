//! Window scanner (04 §8, §10).
