//! End-to-end scenarios live in `tests/tests/`.
