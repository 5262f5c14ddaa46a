//! The RADIUS client.
