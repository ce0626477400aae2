//! Writing Avro binary, for producers of test and demo data (`spate gen`,
//! the tests): [`AvroWrite`] on a byte vector, and the Confluent header.
//! Not on spate's decoding path.

/// Avro binary encoding of the primitive types, appended to a buffer.
pub trait AvroWrite {
    /// `int`/`long`: zig-zag varint.
    fn avro_long(&mut self, v: i64) -> &mut Self;
    /// `string`/`bytes`: length, then the bytes.
    fn avro_bytes(&mut self, b: &[u8]) -> &mut Self;
    /// `boolean`.
    fn avro_bool(&mut self, v: bool) -> &mut Self;
    /// `float`.
    fn avro_f32(&mut self, v: f32) -> &mut Self;
    /// `double`.
    fn avro_f64(&mut self, v: f64) -> &mut Self;
    /// The Confluent wire format header: magic byte 0, schema id (BE).
    fn confluent_header(&mut self, schema_id: u32) -> &mut Self;
}

impl AvroWrite for Vec<u8> {
    fn avro_long(&mut self, v: i64) -> &mut Self {
        let mut n = ((v << 1) ^ (v >> 63)) as u64;
        while n >= 0x80 {
            self.push((n as u8) | 0x80);
            n >>= 7;
        }
        self.push(n as u8);
        self
    }

    fn avro_bytes(&mut self, b: &[u8]) -> &mut Self {
        self.avro_long(b.len() as i64);
        self.extend_from_slice(b);
        self
    }

    fn avro_bool(&mut self, v: bool) -> &mut Self {
        self.push(u8::from(v));
        self
    }

    fn avro_f32(&mut self, v: f32) -> &mut Self {
        self.extend_from_slice(&v.to_le_bytes());
        self
    }

    fn avro_f64(&mut self, v: f64) -> &mut Self {
        self.extend_from_slice(&v.to_le_bytes());
        self
    }

    fn confluent_header(&mut self, schema_id: u32) -> &mut Self {
        self.push(super::MAGIC);
        self.extend_from_slice(&schema_id.to_be_bytes());
        self
    }
}
