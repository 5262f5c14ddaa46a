//! EAP-MSCHAPv2 Type-Data (draft-kamath-pppext-eap-mschapv2-02 §2):
//!
//! ```text
//! OpCode (1) | MS-CHAPv2-ID (1) | MS-Length (2) | data ...
//! ```
//! where MS-Length is the EAP Length minus 5 (the Type-Data's length). The Success and
//! Failure *Responses* are the OpCode alone.

use crate::Error;
use alloc::vec::Vec;

mod field {
    pub const OPCODE: usize = 0;
    pub const MS_ID: usize = 1;
    pub const MS_LENGTH: core::ops::Range<usize> = 2..4;
    pub const VALUE_SIZE: usize = 4;
    pub const VALUE: usize = 5;
}

pub const OP_CHALLENGE: u8 = 1;
pub const OP_RESPONSE: u8 = 2;
pub const OP_SUCCESS: u8 = 3;
pub const OP_FAILURE: u8 = 4;
/// The Challenge's Value-Size (RFC 2759 §4).
pub const CHALLENGE_LEN: usize = 16;
/// The Response's Value-Size: Peer-Challenge (16), Reserved (8), NT-Response (24), Flags (1).
pub const RESPONSE_LEN: usize = 49;

/// One EAP-MSCHAPv2 message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Message<'a> {
    /// Request: the authenticator challenge and the server's name.
    Challenge {
        ms_id: u8,
        challenge: [u8; 16],
        name: &'a [u8],
    },
    /// Response: the peer challenge, the NT-Response and the user name.
    Response {
        ms_id: u8,
        peer_challenge: [u8; 16],
        nt_response: [u8; 24],
        flags: u8,
        name: &'a [u8],
    },
    /// Request: `S=<auth> M=<msg>`.
    SuccessRequest { ms_id: u8, message: &'a [u8] },
    /// Response: the OpCode alone.
    SuccessResponse,
    /// Request: `E=eeeeeeeeee R=r C=cccc V=vvvvvvvvvv M=<msg>`.
    FailureRequest { ms_id: u8, message: &'a [u8] },
    /// Response: the OpCode alone.
    FailureResponse,
}

impl<'a> Message<'a> {
    /// Parses the Type-Data of an EAP Request (`request`) or Response.
    pub fn parse(request: bool, data: &'a [u8]) -> Result<Message<'a>, Error> {
        let op = *data.get(field::OPCODE).ok_or(Error::Truncated)?;
        if !request && (op == OP_SUCCESS || op == OP_FAILURE) {
            // The short Success/Failure Responses: the OpCode alone (trailing octets are
            // tolerated, as Windows has been seen to send none and others pad).
            return Ok(if op == OP_SUCCESS {
                Message::SuccessResponse
            } else {
                Message::FailureResponse
            });
        }
        if data.len() < field::MS_LENGTH.end {
            return Err(Error::Truncated);
        }
        let ms_id = data[field::MS_ID];
        let ms_len = usize::from(u16::from_be_bytes([data[2], data[3]]));
        if ms_len != data.len() {
            return Err(Error::Malformed("MS-Length is not the EAP Length minus 5"));
        }
        match (request, op) {
            (true, OP_CHALLENGE) => {
                let size = *data.get(field::VALUE_SIZE).ok_or(Error::Truncated)?;
                if usize::from(size) != CHALLENGE_LEN {
                    return Err(Error::Malformed("challenge Value-Size is not 16"));
                }
                let v = data
                    .get(field::VALUE..field::VALUE + CHALLENGE_LEN)
                    .ok_or(Error::Truncated)?;
                let mut challenge = [0u8; 16];
                challenge.copy_from_slice(v);
                Ok(Message::Challenge {
                    ms_id,
                    challenge,
                    name: &data[field::VALUE + CHALLENGE_LEN..],
                })
            }
            (false, OP_RESPONSE) => {
                let size = *data.get(field::VALUE_SIZE).ok_or(Error::Truncated)?;
                if usize::from(size) != RESPONSE_LEN {
                    return Err(Error::Malformed("response Value-Size is not 49"));
                }
                let v = data
                    .get(field::VALUE..field::VALUE + RESPONSE_LEN)
                    .ok_or(Error::Truncated)?;
                let mut peer_challenge = [0u8; 16];
                peer_challenge.copy_from_slice(&v[..16]);
                let mut nt_response = [0u8; 24];
                nt_response.copy_from_slice(&v[24..48]);
                Ok(Message::Response {
                    ms_id,
                    peer_challenge,
                    nt_response,
                    flags: v[48],
                    name: &data[field::VALUE + RESPONSE_LEN..],
                })
            }
            (true, OP_SUCCESS) => Ok(Message::SuccessRequest {
                ms_id,
                message: &data[4..],
            }),
            (true, OP_FAILURE) => Ok(Message::FailureRequest {
                ms_id,
                message: &data[4..],
            }),
            _ => Err(Error::Malformed("unknown or misplaced MSCHAPv2 OpCode")),
        }
    }

    /// The Type-Data bytes.
    pub fn to_vec(&self) -> Result<Vec<u8>, Error> {
        let mut v = Vec::new();
        let head = |v: &mut Vec<u8>, op: u8, id: u8| {
            v.extend_from_slice(&[op, id, 0, 0]);
        };
        match *self {
            Message::Challenge { ms_id, challenge, name } => {
                head(&mut v, OP_CHALLENGE, ms_id);
                v.push(CHALLENGE_LEN as u8);
                v.extend_from_slice(&challenge);
                v.extend_from_slice(name);
            }
            Message::Response {
                ms_id,
                peer_challenge,
                nt_response,
                flags,
                name,
            } => {
                head(&mut v, OP_RESPONSE, ms_id);
                v.push(RESPONSE_LEN as u8);
                v.extend_from_slice(&peer_challenge);
                v.extend_from_slice(&[0u8; 8]);
                v.extend_from_slice(&nt_response);
                v.push(flags);
                v.extend_from_slice(name);
            }
            Message::SuccessRequest { ms_id, message } => {
                head(&mut v, OP_SUCCESS, ms_id);
                v.extend_from_slice(message);
            }
            Message::FailureRequest { ms_id, message } => {
                head(&mut v, OP_FAILURE, ms_id);
                v.extend_from_slice(message);
            }
            Message::SuccessResponse => return Ok(alloc::vec![OP_SUCCESS]),
            Message::FailureResponse => return Ok(alloc::vec![OP_FAILURE]),
        }
        let len = u16::try_from(v.len()).map_err(|_| Error::BufferTooSmall)?;
        v[2..4].copy_from_slice(&len.to_be_bytes());
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_errors() {
        let msgs = [
            (
                true,
                Message::Challenge {
                    ms_id: 3,
                    challenge: [7; 16],
                    name: b"srv",
                },
            ),
            (
                false,
                Message::Response {
                    ms_id: 3,
                    peer_challenge: [1; 16],
                    nt_response: [2; 24],
                    flags: 0,
                    name: b"alice",
                },
            ),
            (
                true,
                Message::SuccessRequest {
                    ms_id: 4,
                    message: b"S=00 M=ok",
                },
            ),
            (
                true,
                Message::FailureRequest {
                    ms_id: 4,
                    message: b"E=691 R=0",
                },
            ),
            (false, Message::SuccessResponse),
            (false, Message::FailureResponse),
        ];
        for (req, m) in msgs {
            let v = m.to_vec().unwrap();
            assert_eq!(Message::parse(req, &v).unwrap(), m);
            // Every truncation is an error or (for the OpCode-only ones) the same message.
            for n in 0..v.len() {
                let _ = Message::parse(req, &v[..n]);
                if v.len() > 1 {
                    assert!(Message::parse(req, &v[..n]).is_err(), "{m:?} cut at {n}");
                }
            }
        }
        let mut bad = Message::Challenge {
            ms_id: 3,
            challenge: [7; 16],
            name: b"x",
        }
        .to_vec()
        .unwrap();
        bad[4] = 8;
        assert!(Message::parse(true, &bad).is_err());
        assert!(Message::parse(false, &[OP_CHALLENGE, 1, 0, 4]).is_err());
        assert!(Message::parse(true, &[9, 1, 0, 4]).is_err());
    }
}
