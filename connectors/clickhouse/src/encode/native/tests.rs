//! Tests of [`super::NativeLayout`]: block bytes checked by hand.
use super::*;
use crate::parse_type;

fn layout(cols: &[(&str, &str)]) -> Option<NativeLayout> {
    let types: Vec<(String, ChType)> = cols
        .iter()
        .map(|(n, t)| ((*n).to_owned(), parse_type(t).unwrap()))
        .collect();
    NativeLayout::new(types.iter().map(|(n, t)| (n.as_str(), t)))
}

fn header(out: &mut Vec<u8>, cols: u64, rows: u64) {
    crate::rowbinary::leb128::put(out, cols);
    crate::rowbinary::leb128::put(out, rows);
}

#[test]
fn columns_of_fixed_values_strings_nullables_and_arrays() {
    let l = layout(&[
        ("a", "UInt16"),
        ("s", "String"),
        ("n", "Nullable(Int32)"),
        ("arr", "Array(Nullable(String))"),
    ])
    .unwrap();
    // Row 1: a=1, s="hi", n=NULL, arr=["x", NULL]
    // Row 2: a=515, s="", n=7, arr=[]
    let rows: Vec<u8> = [
        &[1u8, 0][..],
        &[2, b'h', b'i'],
        &[1],
        &[2, 0, 1, b'x', 1],
        &[3, 2],
        &[0],
        &[0, 7, 0, 0, 0],
        &[0],
    ]
    .concat();
    let got = l.transpose(&rows).unwrap();
    let mut want = Vec::new();
    header(&mut want, 4, 2);
    put_str(&mut want, b"a");
    put_str(&mut want, b"UInt16");
    want.extend_from_slice(&[1, 0, 3, 2]);
    put_str(&mut want, b"s");
    put_str(&mut want, b"String");
    want.extend_from_slice(&[2, b'h', b'i', 0]);
    put_str(&mut want, b"n");
    put_str(&mut want, b"Nullable(Int32)");
    want.extend_from_slice(&[1, 0]); // null map
    want.extend_from_slice(&[0, 0, 0, 0, 7, 0, 0, 0]); // default, then 7
    put_str(&mut want, b"arr");
    put_str(&mut want, b"Array(Nullable(String))");
    want.extend_from_slice(&2u64.to_le_bytes()); // offsets: 2, 2
    want.extend_from_slice(&2u64.to_le_bytes());
    want.extend_from_slice(&[0, 1]); // null map of the elements
    want.extend_from_slice(&[1, b'x', 0]); // "x", "" for the NULL
    assert_eq!(got, want);
}

#[test]
fn nested_arrays_and_tuples() {
    let l = layout(&[("aa", "Array(Array(UInt8))"), ("t", "Tuple(UInt8, String)")]).unwrap();
    // [[1,2],[]], (7,"s")  then  [[]], (8,"")
    let rows: Vec<u8> = [&[2u8, 2, 1, 2, 0][..], &[7, 1, b's'], &[1, 0], &[8, 0]].concat();
    let got = l.transpose(&rows).unwrap();
    let mut want = Vec::new();
    header(&mut want, 2, 2);
    put_str(&mut want, b"aa");
    put_str(&mut want, b"Array(Array(UInt8))");
    for o in [2u64, 3] {
        want.extend_from_slice(&o.to_le_bytes()); // outer offsets
    }
    for o in [2u64, 2, 2] {
        want.extend_from_slice(&o.to_le_bytes()); // inner offsets
    }
    want.extend_from_slice(&[1, 2]);
    put_str(&mut want, b"t");
    put_str(&mut want, b"Tuple(UInt8, String)");
    want.extend_from_slice(&[7, 8]);
    want.extend_from_slice(&[1, b's', 0]);
    assert_eq!(got, want);
}

fn u64s(out: &mut Vec<u8>, vals: &[u64]) {
    for v in vals {
        out.extend_from_slice(&v.to_le_bytes());
    }
}

#[test]
fn low_cardinality_keys_and_indexes() {
    let l = layout(&[
        ("lc", "LowCardinality(String)"),
        ("lcn", "LowCardinality(Nullable(String))"),
    ])
    .unwrap();
    assert_eq!(
        l.type_names().collect::<Vec<_>>(),
        ["LowCardinality(String)", "LowCardinality(Nullable(String))"]
    );
    // ("DE", NULL), ("FR", "x"), ("DE", "x")
    let rows: Vec<u8> = [
        &[2u8, b'D', b'E'][..],
        &[1],
        &[2, b'F', b'R'],
        &[0, 1, b'x'],
        &[2, b'D', b'E'],
        &[0, 1, b'x'],
    ]
    .concat();
    let got = l.transpose(&rows).unwrap();
    let mut want = Vec::new();
    header(&mut want, 2, 3);
    put_str(&mut want, b"lc");
    put_str(&mut want, b"LowCardinality(String)");
    u64s(&mut want, &[1, 1 << 9, 2]); // version, UInt8 indexes + keys, 2 keys
    want.extend_from_slice(&[2, b'D', b'E', 2, b'F', b'R']);
    u64s(&mut want, &[3]);
    want.extend_from_slice(&[0, 1, 0]);
    put_str(&mut want, b"lcn");
    put_str(&mut want, b"LowCardinality(Nullable(String))");
    u64s(&mut want, &[1, 1 << 9, 2]); // key 0 is NULL
    want.extend_from_slice(&[0, 1, b'x']);
    u64s(&mut want, &[3]);
    want.extend_from_slice(&[0, 1, 1]);
    assert_eq!(got, want);
}

#[test]
fn low_cardinality_indexes_widen_with_the_keys() {
    let l = layout(&[("lc", "LowCardinality(UInt32)")]).unwrap();
    let rows: Vec<u8> = (0u32..300).flat_map(u32::to_le_bytes).collect();
    let got = l.transpose(&rows).unwrap();
    let tail = &got[got.len() - 600..];
    assert_eq!(&tail[..2], &[0, 0]);
    assert_eq!(&tail[598..], &299u16.to_le_bytes());
    let flags = &got[got.len() - 600 - 8 - 1200 - 16..][..8];
    assert_eq!(flags, &(1u64 | 1 << 9).to_le_bytes(), "UInt16 indexes");
}

#[test]
fn types_it_does_not_transpose_keep_rowbinary() {
    for t in [
        "Map(String, UInt64)",
        "Array(LowCardinality(String))",
        "Nullable(Nothing)",
        "Tuple(LowCardinality(String), UInt8)",
    ] {
        assert!(layout(&[("a", "UInt8"), ("x", t)]).is_none(), "{t}");
    }
    assert!(layout(&[]).is_none());
}

#[test]
fn fixed_widths_follow_the_type() {
    for (t, w) in [
        ("Decimal(9, 2)", 4),
        ("Decimal(18, 4)", 8),
        ("Decimal(38, 10)", 16),
        ("DateTime64(3)", 8),
        ("UUID", 16),
        ("FixedString(5)", 5),
        ("Enum16('a' = 1)", 2),
        ("Date", 2),
        ("IPv6", 16),
    ] {
        let l = layout(&[("x", t)]).unwrap();
        let row = vec![9u8; w];
        let out = l.transpose(&[row.clone(), row].concat()).unwrap();
        assert!(out.ends_with(&vec![9u8; 2 * w]), "{t}");
        assert!(l.transpose(&vec![9u8; w + 1]).is_err(), "{t}: a cut row");
    }
}

#[test]
fn default_flags_group_rows_by_missing_columns() {
    let l = layout(&[("a", "UInt8"), ("s", "String"), ("n", "Nullable(UInt8)")])
        .unwrap()
        .with_default_flags();
    // (1, "x", 5), (2, -, NULL), (3, "y", 6), (-, -, -)
    let rows: Vec<u8> = [
        &[0u8, 1, 0, 1, b'x', 0, 0, 5][..],
        &[0, 2, 1, 0, 1],
        &[0, 3, 0, 1, b'y', 0, 0, 6],
        &[1, 1, 1],
    ]
    .concat();
    let got = l.transpose(&rows).unwrap();
    let mut want = Vec::new();
    header(&mut want, 3, 2);
    put_str(&mut want, b"a");
    put_str(&mut want, b"UInt8");
    want.extend_from_slice(&[1, 3]);
    put_str(&mut want, b"s");
    put_str(&mut want, b"String");
    want.extend_from_slice(&[1, b'x', 1, b'y']);
    put_str(&mut want, b"n");
    put_str(&mut want, b"Nullable(UInt8)");
    want.extend_from_slice(&[0, 0, 5, 6]);
    header(&mut want, 2, 1);
    put_str(&mut want, b"a");
    put_str(&mut want, b"UInt8");
    want.push(2);
    put_str(&mut want, b"n");
    put_str(&mut want, b"Nullable(UInt8)");
    want.extend_from_slice(&[1, 0]);
    // Every column missing: the first takes its zero value.
    header(&mut want, 1, 1);
    put_str(&mut want, b"a");
    put_str(&mut want, b"UInt8");
    want.push(0);
    assert_eq!(got, want);
    assert!(l.transpose(&[2, 1, 1]).is_err(), "bad default flag");
    assert!(l.transpose(&[0, 1, 0]).is_err(), "cut row");
}

#[test]
fn zero_values_of_every_shape() {
    let l = layout(&[
        ("lc", "LowCardinality(String)"),
        ("arr", "Array(UInt8)"),
        ("t", "Tuple(UInt8, Nullable(String))"),
        ("lcn", "LowCardinality(Nullable(UInt16))"),
    ])
    .unwrap()
    .with_default_flags();
    let got = l.transpose(&[1, 1, 1, 1]).unwrap();
    let mut want = Vec::new();
    header(&mut want, 1, 1);
    put_str(&mut want, b"lc");
    put_str(&mut want, b"LowCardinality(String)");
    u64s(&mut want, &[1, 1 << 9, 1]);
    want.push(0); // the key ""
    u64s(&mut want, &[1]);
    want.push(0);
    assert_eq!(got, want);
    let mut b = Builder::new(
        &shape(&parse_type("Tuple(UInt8, Nullable(String))").unwrap(), true).unwrap(),
        1,
    );
    b.push_zero();
    let mut out = Vec::new();
    b.write(&mut out);
    assert_eq!(out, [0, 1, 0]);
    let mut b = Builder::new(&Shape::Array(Box::new(Shape::Fixed(1))), 1);
    b.push_zero();
    let mut out = Vec::new();
    b.write(&mut out);
    assert_eq!(out, 0u64.to_le_bytes());
}

#[test]
fn malformed_batches_are_errors_not_panics() {
    let l = layout(&[("s", "String"), ("n", "Nullable(UInt8)")]).unwrap();
    assert!(l.transpose(&[5, b'a']).is_err(), "string cut short");
    assert!(l.transpose(&[0, 2]).is_err(), "bad nullable flag");
    assert!(l.transpose(&[0xff; 11]).is_err(), "endless varint");
    assert!(l.transpose(&[]).unwrap().starts_with(&[2, 0]), "no rows");
}

/// RowBinary of row `i` of the reuse tests' layout.
fn reuse_row(i: u64, out: &mut Vec<u8>) {
    out.extend_from_slice(&(i as u16).to_le_bytes());
    let s = "x".repeat((i % 7) as usize);
    put_str(out, s.as_bytes());
    if i.is_multiple_of(3) {
        out.push(1);
    } else {
        out.push(0);
        out.extend_from_slice(&(i as i32).to_le_bytes());
    }
    crate::rowbinary::leb128::put(out, i % 4);
    for k in 0..i % 4 {
        if k % 2 == 0 {
            out.push(1);
        } else {
            out.push(0);
            put_str(out, b"el");
        }
    }
    put_str(out, format!("k{}", i % 5).as_bytes());
    out.push(i as u8);
    put_str(out, b"t");
    // LowCardinality(Nullable(String)): NULL every fourth row, else one
    // of three keys.
    if i.is_multiple_of(4) {
        out.push(1);
    } else {
        out.push(0);
        put_str(out, format!("n{}", i % 3).as_bytes());
    }
}

#[test]
fn a_kept_scratch_gives_the_blocks_a_fresh_one_gives() {
    let l = layout(&[
        ("a", "UInt16"),
        ("s", "String"),
        ("n", "Nullable(Int32)"),
        ("arr", "Array(Nullable(String))"),
        ("lc", "LowCardinality(String)"),
        ("t", "Tuple(UInt8, String)"),
        ("lcn", "LowCardinality(Nullable(String))"),
    ])
    .unwrap();
    let mut scratch = NativeScratch::default();
    let mut start = 0;
    for n in [3u64, 2000, 1, 50, 2000] {
        let mut rows = Vec::new();
        (start..start + n).for_each(|i| reuse_row(i, &mut rows));
        start += n;
        let fresh = l.transpose(&rows).unwrap();
        let kept = l.transpose_in(&rows, &mut scratch).unwrap();
        assert_eq!(kept, fresh, "batch of {n} rows");
        let held = scratch.bytes();
        assert!(
            held >= rows.len(),
            "the builders keep their capacity: {held}"
        );
        // The body handed back is reused by the next block.
        let ptr = kept.as_ptr();
        scratch.give_body(kept, usize::MAX);
        let again = l.transpose_in(&rows, &mut scratch).unwrap();
        assert_eq!((again.as_ptr(), &again), (ptr, &fresh));
    }
    // Another layout: builders made anew, still the same bytes.
    let other = layout(&[("a", "UInt64"), ("s", "String")]).unwrap();
    let mut rows = Vec::new();
    for i in 0..10u64 {
        rows.extend_from_slice(&i.to_le_bytes());
        put_str(&mut rows, b"abc");
    }
    assert_eq!(
        other.transpose_in(&rows, &mut scratch).unwrap(),
        other.transpose(&rows).unwrap()
    );
}

#[test]
fn a_scratch_never_holds_more_than_its_room() {
    let l = layout(&[("a", "UInt64"), ("s", "String")]).unwrap();
    let mut rows = Vec::new();
    for i in 0..10_000u64 {
        rows.extend_from_slice(&i.to_le_bytes());
        put_str(&mut rows, b"some text");
    }
    let mut scratch = NativeScratch::default();
    let body = l.transpose_in(&rows, &mut scratch).unwrap();
    let builders = scratch.bytes();
    assert!(builders > 0);
    scratch.give_body(body, builders + 10);
    assert_eq!(
        scratch.bytes(),
        builders,
        "the body did not fit beside the builders"
    );
    scratch.fit(builders - 1);
    assert_eq!(scratch.bytes(), 0);
    // Emptied, it still transposes (and makes its builders again).
    let again = l.transpose_in(&rows, &mut scratch).unwrap();
    assert_eq!(again, l.transpose(&rows).unwrap());
}
