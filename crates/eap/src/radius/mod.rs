//! RADIUS (RFC 2865) for EAP pass-through (RFC 3579).
