use super::*;

fn b(t: ChType) -> Box<ChType> {
    Box::new(t)
}

#[test]
fn scalars() {
    for (s, t) in [
        ("UInt8", ChType::UInt8),
        ("UInt64", ChType::UInt64),
        ("Int128", ChType::Int128),
        ("UInt128", ChType::UInt128),
        ("Float32", ChType::Float32),
        ("String", ChType::String),
        ("UUID", ChType::Uuid),
        ("Bool", ChType::Bool),
        ("IPv4", ChType::IPv4),
        ("IPv6", ChType::IPv6),
        ("Nothing", ChType::Nothing),
        ("Date", ChType::Date),
        ("DateTime", ChType::DateTime(None)),
        ("FixedString(16)", ChType::FixedString(16)),
    ] {
        assert_eq!(parse_type(s), Ok(t), "{s}");
    }
}

#[test]
fn parameterised() {
    assert_eq!(
        parse_type("DateTime('Europe/Moscow')"),
        Ok(ChType::DateTime(Some("Europe/Moscow".into())))
    );
    assert_eq!(parse_type("DateTime64(3)"), Ok(ChType::DateTime64(3, None)));
    assert_eq!(
        parse_type("DateTime64(6, 'UTC')"),
        Ok(ChType::DateTime64(6, Some("UTC".into())))
    );
    assert_eq!(
        parse_type("Decimal(10, 2)"),
        Ok(ChType::Decimal {
            precision: 10,
            scale: 2
        })
    );
    assert_eq!(
        parse_type("Decimal32(4)"),
        Ok(ChType::Decimal {
            precision: 9,
            scale: 4
        })
    );
    assert_eq!(
        parse_type("Decimal64(4)"),
        Ok(ChType::Decimal {
            precision: 18,
            scale: 4
        })
    );
    assert_eq!(
        parse_type("Decimal128(0)"),
        Ok(ChType::Decimal {
            precision: 38,
            scale: 0
        })
    );
    assert_eq!(
        parse_type("Decimal256(2)"),
        Ok(ChType::Decimal {
            precision: 76,
            scale: 2
        })
    );
    assert!(parse_type("Decimal(77, 0)").is_err());
    assert!(parse_type("DateTime64(10)").is_err());
    assert!(parse_type("Decimal(5, 6)").is_err());
}

#[test]
fn nested() {
    assert_eq!(
        parse_type("Array(Nullable(LowCardinality(String)))"),
        Ok(ChType::Array(b(ChType::Nullable(b(
            ChType::LowCardinality(b(ChType::String))
        )))))
    );
    assert_eq!(
        parse_type("Map(String, Array(Tuple(UInt8, String)))"),
        Ok(ChType::Map(
            b(ChType::String),
            b(ChType::Array(b(ChType::Tuple(vec![
                (None, ChType::UInt8),
                (None, ChType::String)
            ]))))
        ))
    );
    assert_eq!(
        parse_type("Tuple(a UInt8, `b c` Nullable(String), d DateTime64(3, 'UTC'))"),
        Ok(ChType::Tuple(vec![
            (Some("a".into()), ChType::UInt8),
            (Some("b c".into()), ChType::Nullable(b(ChType::String))),
            (Some("d".into()), ChType::DateTime64(3, Some("UTC".into()))),
        ]))
    );
}

#[test]
fn enums_with_escapes_commas_and_parens() {
    let t = parse_type(r"Enum8('a' = 1, 'it\'s, (odd)' = -2, 'back\\slash' = 3, '' = 0)");
    assert_eq!(
        t,
        Ok(ChType::Enum8(vec![
            ("a".into(), 1),
            ("it's, (odd)".into(), -2),
            ("back\\slash".into(), 3),
            (String::new(), 0),
        ]))
    );
    assert_eq!(
        parse_type("Enum16('x' = 1000)"),
        Ok(ChType::Enum16(vec![("x".into(), 1000)]))
    );
    assert!(parse_type("Enum8('x' = 1000)").is_err());
}

#[test]
fn display_round_trips() {
    for s in [
        "Array(Nullable(String))",
        "Map(String, UInt64)",
        "Tuple(a UInt8, b String)",
        r"Enum8('it\'s' = 1, 'b' = 2)",
        "DateTime64(3, 'UTC')",
        "Decimal(10, 2)",
        "LowCardinality(Nullable(String))",
    ] {
        let t = parse_type(s).unwrap();
        assert_eq!(t.to_string(), s);
        assert_eq!(parse_type(&t.to_string()), Ok(t));
    }
}

#[test]
fn malformed() {
    for s in [
        "",
        "Array(",
        "Array(String",
        "Nullable(String))",
        "Foo",
        "Enum8('a)",
        "FixedString(0)",
        "Map(String)",
    ] {
        assert!(parse_type(s).is_err(), "{s:?}");
    }
}

#[test]
fn wide_integers() {
    assert_eq!(parse_type("Int256"), Ok(ChType::Int256));
    assert_eq!(parse_type("UInt256"), Ok(ChType::UInt256));
    assert!(ChType::Int256.is_integer() && ChType::UInt256.is_integer());
}

#[test]
fn variant_alternatives_are_sorted_by_name() {
    assert_eq!(
        parse_type("Variant(UInt64, String, Array(UInt64))"),
        Ok(ChType::Variant(vec![
            ChType::Array(b(ChType::UInt64)),
            ChType::String,
            ChType::UInt64,
        ]))
    );
    assert_eq!(
        parse_type("Variant(UInt64, String, Array(UInt64))")
            .unwrap()
            .to_string(),
        "Variant(Array(UInt64), String, UInt64)"
    );
    assert!(parse_type("Variant(").is_err());
}

#[test]
fn dynamic_with_and_without_max_types() {
    assert_eq!(parse_type("Dynamic"), Ok(ChType::Dynamic(None)));
    assert_eq!(
        parse_type("Dynamic(max_types=8)"),
        Ok(ChType::Dynamic(Some(8)))
    );
    assert_eq!(ChType::Dynamic(Some(8)).to_string(), "Dynamic(max_types=8)");
    assert!(parse_type("Dynamic(other=1)").is_err());
}

#[test]
fn json_types_with_typed_and_skipped_paths() {
    assert_eq!(parse_type("JSON"), Ok(ChType::Json(JsonSpec::default())));
    let t = parse_type("JSON(max_dynamic_paths=16, a.b UInt32, `c d`.e String, SKIP f.g)").unwrap();
    assert_eq!(
        t,
        ChType::Json(JsonSpec {
            params: vec![("max_dynamic_paths".into(), 16)],
            typed: vec![
                ("a.b".into(), ChType::UInt32),
                ("c d.e".into(), ChType::String)
            ],
            skip: vec!["f.g".into()],
        })
    );
    assert_eq!(
        parse_type("JSON(a UInt8, SKIP b)").unwrap().to_string(),
        "JSON(a UInt8, SKIP b)"
    );
    assert!(matches!(
        parse_type("JSON(SKIP REGEXP 'x.*')"),
        Err(TypeError::Unsupported(_))
    ));
    assert!(parse_type("JSON(a)").is_err());
}
