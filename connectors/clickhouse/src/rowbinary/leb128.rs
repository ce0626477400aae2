//! Unsigned LEB128, the one varint of RowBinary, Native, Protobuf and the
//! dead-letter record: one writer and one reader for the whole crate.

/// Append `n` as an unsigned LEB128 varint.
#[inline]
pub(crate) fn put(out: &mut Vec<u8>, n: u64) {
    let (buf, len) = encode(n);
    out.extend_from_slice(&buf[..len]);
}

/// `n` as an unsigned LEB128 varint: its bytes and how many there are.
#[inline]
pub(crate) fn encode(mut n: u64) -> ([u8; 10], usize) {
    let mut buf = [0u8; 10];
    let mut len = 0;
    while n >= 0x80 {
        buf[len] = (n as u8) | 0x80;
        n >>= 7;
        len += 1;
    }
    buf[len] = n as u8;
    (buf, len + 1)
}

/// Why a varint could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Bad {
    /// The bytes end before the varint does.
    Ends,
    /// More than 64 bits.
    TooLong,
}

/// Read one varint from `b` at `*pos`, advancing `*pos` past it.
#[inline]
pub(crate) fn read(b: &[u8], pos: &mut usize) -> Result<u64, Bad> {
    let mut v: u64 = 0;
    let mut shift = 0u32;
    loop {
        let &byte = b.get(*pos).ok_or(Bad::Ends)?;
        *pos += 1;
        if shift == 63 && byte > 1 {
            return Err(Bad::TooLong);
        }
        v |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(v);
        }
        shift += 7;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn read_inverts_put(n in any::<u64>()) {
            let mut out = vec![0xAA];
            put(&mut out, n);
            let mut pos = 1;
            prop_assert_eq!(read(&out, &mut pos), Ok(n));
            prop_assert_eq!(pos, out.len());
        }
    }

    #[test]
    fn truncated_and_overlong_are_refused() {
        assert_eq!(read(&[0x80], &mut 0), Err(Bad::Ends));
        let mut eleven = vec![0xff; 10];
        eleven.push(0x01);
        assert_eq!(read(&eleven, &mut 0), Err(Bad::TooLong));
        let mut max = vec![0xff; 9];
        max.push(0x01);
        assert_eq!(read(&max, &mut 0), Ok(u64::MAX));
        assert_eq!(read(&[0x7f], &mut 0), Ok(127));
        assert_eq!(encode(300), ([0xac, 0x02, 0, 0, 0, 0, 0, 0, 0, 0], 2));
    }
}
