//! Host side of rdmacam.
