//! Claude row classifier (04 §9).
