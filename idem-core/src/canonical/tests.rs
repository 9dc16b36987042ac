use super::*;
use serde_json::json;

/// Every finite double, zeros and subnormals included.
fn finite_f64() -> proptest::num::f64::Any {
    use proptest::num::f64::{NEGATIVE, NORMAL, POSITIVE, SUBNORMAL, ZERO};
    POSITIVE | NEGATIVE | NORMAL | SUBNORMAL | ZERO
}

#[test]
fn keys_sorted_and_whitespace_dropped() {
    let v: Value =
        serde_json::from_str("{ \"z\" : 1 , \"a\" : { \"y\": [1, 2], \"b\": \"é\\n\" } }").unwrap();
    assert_eq!(canonical_json(&v), r#"{"a":{"b":"é\n","y":[1,2]},"z":1}"#);
}

#[test]
fn numbers_normalised() {
    assert_eq!(
        canonical_json(&json!([1.0, -0.0, 1e3, 0.5, -7, u64::MAX, 1e300])),
        format!("[1,0,1000,0.5,-7,{},1e+300]", u64::MAX)
    );
}

/// Whether serde_json keeps each number's text (`arbitrary_precision`, which any crate in
/// the build can turn on) rather than parsing it to an `i64`, `u64` or `f64`, told by
/// another literal than `literals_kept` uses: 0.1 survives to 34 digits only then.
fn arbitrary_precision() -> bool {
    let literal = "0.1000000000000000055511151231257827";
    let n: Value = serde_json::from_str(literal).expect("a JSON number");
    serde_json::to_string(&n).expect("a number serialises") == literal
}

#[test]
fn literals_kept_tells_the_mode() {
    assert_eq!(literals_kept(), arbitrary_precision());
}

/// The canonical text of a JSON literal, or `None` when serde_json refuses it.
fn canonical_of(literal: &str) -> Option<String> {
    serde_json::from_str::<Value>(literal)
        .ok()
        .map(|v| canonical_json(&v))
}

#[test]
fn equal_numbers_have_one_text() {
    // Each row is one value, then ways to write it; in either mode all give the first.
    let rows: &[&[&str]] = &[
        &["1", "1.0", "1e0", "10e-1", "0.1e1", "1.000E+0"],
        &["0", "-0", "-0.0", "0e10", "0.000", "-0E-3"],
        &["5", "0.5e1", "5.0", "50e-1"],
        &["100", "1E2", "1e+2", "100.00", "0.001e5"],
        &["-7", "-7.0", "-0.7e1", "-700e-2"],
        &["1.5", "15e-1", "0.15e1", "1.50"],
        &["-7.25", "-725e-2", "-0.725E1"],
        &["0.1", "1e-1", "0.10", "100e-3"],
        &["0.000001", "1e-6", "10e-7"],
        &["1.5e-7", "0.00000015", "15E-8"],
        &[
            "10000000000000000",
            "1e16",
            "1E16",
            "1.0e16",
            "100000000000000000e-1",
            "0.00001e21",
        ],
        &[
            "9007199254740991",
            "9007199254740991.0",
            "9.007199254740991e15",
        ],
        &[
            "-9007199254740992",
            "-9007199254740992.0",
            "-9.007199254740992E15",
        ],
        &["100000000000000000000", "1e20", "10e19"],
        &["1e+21", "1e21", "1000000000000000000000", "10e20"],
        &["1e+300", "1e300", "1E+300", "0.1e301"],
        &["-1.5e-300", "-15e-301", "-0.00015e-296"],
    ];
    let ap = arbitrary_precision();
    let mut wrong = Vec::new();
    for row in rows {
        for literal in *row {
            let got = canonical_of(literal);
            if got.as_deref() != Some(row[0]) {
                wrong.push(format!("{literal} gave {got:?}, not {}", row[0]));
            }
        }
    }
    assert!(wrong.is_empty(), "arbitrary_precision: {ap}: {wrong:#?}");
}

#[test]
fn distinct_numbers_have_distinct_texts() {
    let huge = format!("1{}", "0".repeat(400));
    let tiny = format!("0.{}1", "0".repeat(400));
    // A literal, its canonical text with arbitrary_precision, and without it (`None`
    // where serde_json refuses the literal, out of f64's range).
    let rows: &[(&str, &str, Option<&str>)] = &[
        (
            "18446744073709551616",
            "18446744073709551616",
            Some("18446744073709552000"),
        ),
        (
            "18446744073709551617",
            "18446744073709551617",
            Some("18446744073709552000"),
        ),
        ("0.1", "0.1", Some("0.1")),
        (
            "0.1000000000000000055511151231257827",
            "0.1000000000000000055511151231257827",
            Some("0.1"),
        ),
        // Any literal with a point or an exponent is an f64 without the feature.
        (
            "18446744073709551615e0",
            "18446744073709551615",
            Some("18446744073709552000"),
        ),
        (
            "18446744073709551615.5",
            "18446744073709551615.5",
            Some("18446744073709552000"),
        ),
        (
            "123456789012345678901234567890",
            "1.2345678901234567890123456789e+29",
            Some("1.2345678901234568e+29"),
        ),
        (
            "-0.0000001234567890123456789",
            "-1.234567890123456789e-7",
            Some("-1.2345678901234568e-7"),
        ),
        ("1e1000000000", "1e+1000000000", None),
        ("-1.5e-1000000000", "-1.5e-1000000000", Some("0")),
        // Exponents beyond 64 bits, exact.
        ("1e99999999999999999999", "1e+99999999999999999999", None),
        ("10e99999999999999999999", "1e+100000000000000000000", None),
        (
            "0.01e-99999999999999999999",
            "1e-100000000000000000001",
            Some("0"),
        ),
        (
            "-123.4e-18446744073709551617",
            "-1.234e-18446744073709551615",
            Some("0"),
        ),
        (&huge, "1e+400", None),
        (&tiny, "1e-401", Some("0")),
    ];
    let ap = arbitrary_precision();
    let mut wrong = Vec::new();
    for (literal, with, without) in rows {
        let expected = if ap { Some(*with) } else { *without };
        let got = canonical_of(literal);
        if got.as_deref() != expected {
            wrong.push(format!("{literal} gave {got:?}, not {expected:?}"));
        }
    }
    assert!(wrong.is_empty(), "arbitrary_precision: {ap}: {wrong:#?}");
    // The texts with the feature are those of distinct values, so all differ.
    let texts: std::collections::BTreeSet<&str> = rows.iter().map(|row| row.1).collect();
    assert_eq!(texts.len(), rows.len());
}

/// The canonical text of a number literal as this module reads it, which is how it
/// reads every literal with `arbitrary_precision`, whatever serde_json's mode here.
fn normalised(literal: &str) -> Option<String> {
    let mut text = literal.as_bytes().to_vec();
    let mut out = String::new();
    Decimal::parse(&mut text)?.write(&mut out);
    Some(out)
}

#[test]
fn decimals_normalised_in_either_mode() {
    let long = |digit: &str, count: usize| digit.repeat(count);
    let rows = [
        ("0", "0".to_owned()),
        (
            "-0.000e-99999999999999999999999999999999999",
            "0".to_owned(),
        ),
        ("-10e-1", "-1".to_owned()),
        ("0012.50", "12.5".to_owned()),
        ("123456789012345678901", "123456789012345678901".to_owned()),
        (
            "1234567890123456789012",
            "1.234567890123456789012e+21".to_owned(),
        ),
        ("0.00000123", "0.00000123".to_owned()),
        ("0.0000001", "1e-7".to_owned()),
        ("12.5e-8", "1.25e-7".to_owned()),
        (
            "1.5e+0000000000000000000000000000000000000007",
            "15000000".to_owned(),
        ),
        // Exponents too long for an i128, carried and borrowed digit by digit.
        (
            &format!("1e{}", long("9", 40)),
            format!("1e+{}", long("9", 40)),
        ),
        (
            &format!("10e{}", long("9", 40)),
            format!("1e+1{}", long("0", 40)),
        ),
        (
            &format!("0.1e-1{}", long("0", 40)),
            format!("1e-1{}1", long("0", 39)),
        ),
        (
            &format!("100e-1{}", long("0", 40)),
            format!("1e-{}8", long("9", 39)),
        ),
        (
            &format!("-0.05e+1{}", long("0", 40)),
            format!("-5e+{}8", long("9", 39)),
        ),
    ];
    for (literal, expected) in &rows {
        assert_eq!(normalised(literal).as_ref(), Some(expected), "{literal}");
    }
    for not_a_number in [
        "", "-", "+1", "1.", ".5", "1e", "1e+", "1x", "--1", "1.2.3", "1e5e5",
    ] {
        assert_eq!(normalised(not_a_number), None, "{not_a_number:?}");
    }
}

#[test]
fn number_text_moves_to_the_heap_when_long() {
    let mut text = NumberText::default();
    let part = "1234567890123456789.";
    let _ = write!(text, "{part}");
    let _ = write!(text, "{part}");
    assert_eq!(text.as_mut_bytes(), part.repeat(2).as_bytes());
    let _ = write!(text, "5");
    assert_eq!(
        text.as_mut_bytes(),
        format!("{}5", part.repeat(2)).as_bytes()
    );
}

#[test]
fn needs_escape_on_every_byte_at_every_position() {
    for filler in [b'a', 0x20, 0x7f, 0x80, 0xff] {
        for v in 0..=255u8 {
            for at in 0..8 {
                let mut bytes = [filler; 8];
                bytes[at] = v;
                let expected = bytes.iter().any(|&b| b < 0x20 || b == b'"' || b == b'\\');
                assert_eq!(
                    needs_escape(u64::from_le_bytes(bytes)),
                    expected,
                    "{bytes:02x?}"
                );
            }
        }
    }
}

proptest::proptest! {
    #[test]
    fn write_string_matches_serde_json_on_any_text(s in "(?s).{0,80}", cut in 0usize..16) {
        // Escapes at every offset of the eight-byte stride, in and around multi-byte text.
        let s = format!("{}{s}\u{1}\"\\{}", "é".repeat(cut % 3), "x".repeat(cut));
        let mut out = String::new();
        write_string(&s, &mut out);
        proptest::prop_assert_eq!(out, serde_json::to_string(&s).unwrap());
    }

    #[test]
    fn f64_canonical_text_reads_back_as_itself(f in finite_f64()) {
        let text = canonical_json(&Value::from(f));
        let back: Value = serde_json::from_str(&text).expect("canonical JSON parses");
        proptest::prop_assert_eq!(canonical_json(&back), text.as_str());
        // And it still means `f` (0 and -0 compare equal).
        proptest::prop_assert_eq!(text.parse::<f64>(), Ok(f));
    }

    #[test]
    fn f64_scientific_and_plain_spellings_agree(f in finite_f64()) {
        let text = canonical_of(&format!("{f:e}")).expect("a JSON number");
        for literal in [format!("{f}"), format!("{f:E}")] {
            proptest::prop_assert_eq!(canonical_of(&literal), Some(text.clone()), "{}", literal);
        }
        proptest::prop_assert_eq!(text.parse::<f64>(), Ok(f));
        // Without the feature the literal is the f64 itself. With it the literal is
        // exact, and where two shortest texts tie (1251813908295546.25 is halfway
        // between ...546.2 and ...546.3) Rust's is not always serde_json's.
        if !arbitrary_precision() {
            proptest::prop_assert_eq!(canonical_json(&Value::from(f)), text);
        }
    }

    #[test]
    fn i64_canonical_text_is_its_decimal(i: i64) {
        let text = canonical_json(&Value::from(i));
        proptest::prop_assert_eq!(&text, &i.to_string());
        proptest::prop_assert_eq!(canonical_of(&text), Some(text.clone()));
        // Written as a float it is the same value with the feature, and without it
        // whenever a double holds it exactly.
        if arbitrary_precision() || i.unsigned_abs() <= 1 << 53 {
            for literal in [format!("{i}.0"), format!("{i}e0"), format!("{i}0e-1")] {
                proptest::prop_assert_eq!(canonical_of(&literal), Some(text.clone()), "{}", literal);
            }
        }
    }

    #[test]
    fn decimal_spellings_agree(
        negative: bool,
        mantissa in 1u64..,
        exp in -40i64..40,
        (lead, trail, exp_zeros) in (0usize..3, 0usize..3, 0usize..3),
        point in 0usize..24,
    ) {
        // Read by this module as it reads every literal with the feature, in either mode.
        let sign = if negative { "-" } else { "" };
        let canonical = normalised(&format!("{sign}{mantissa}e{exp}")).expect("a literal");
        proptest::prop_assert_eq!(normalised(&canonical), Some(canonical.clone()));
        // It still means the same (as far as an f64 tells).
        proptest::prop_assert_eq!(
            canonical.parse::<f64>(),
            format!("{sign}{mantissa}e{exp}").parse::<f64>()
        );
        // The same value with zeros before and after, the point anywhere, and the
        // exponent padded and moved to match.
        let digits = format!("{}{mantissa}{}", "0".repeat(lead), "0".repeat(trail));
        let point = 1 + point % digits.len();
        let (int, frac) = digits.split_at(point);
        let moved = exp - trail as i64 - point as i64 + digits.len() as i64;
        let spelled = format!(
            "{sign}{int}{}{frac}E{}{}{}",
            if frac.is_empty() { "" } else { "." },
            if moved < 0 { "-" } else { "+" },
            "0".repeat(exp_zeros),
            moved.unsigned_abs(),
        );
        proptest::prop_assert_eq!(normalised(&spelled), Some(canonical), "{}", spelled);
    }

    #[test]
    fn decimal_reading_never_panics_and_reads_its_own_text(literal in "[-+.eE0-9]{0,12}") {
        if let Some(canonical) = normalised(&literal) {
            proptest::prop_assert_eq!(normalised(&canonical), Some(canonical.clone()));
        }
    }

    #[test]
    fn needs_escape_is_exact(word: u64) {
        let bytes = word.to_le_bytes();
        let expected = bytes.iter().any(|&b| b < 0x20 || b == b'"' || b == b'\\');
        proptest::prop_assert_eq!(needs_escape(word), expected, "{:02x?}", bytes);
    }
}

#[test]
fn write_string_matches_serde_json() {
    let mut cases: Vec<String> = (0u32..0x80)
        .filter_map(char::from_u32)
        .map(|c| format!("a{c}b"))
        .collect();
    cases.extend(
        [
            "",
            "plain",
            "é\n\"q\"\\",
            "\u{7f}\u{80}\u{2028}😀",
            "\u{0}\u{1f}",
        ]
        .map(String::from),
    );
    for s in cases {
        let mut out = String::new();
        write_string(&s, &mut out);
        assert_eq!(out, serde_json::to_string(&s).unwrap(), "{s:?}");
    }
}

#[test]
fn unsorted_maps_are_sorted() {
    // Whatever order a map iterates in, the canonical text is sorted.
    let mut map = serde_json::Map::new();
    for k in ["b", "a", "é", "A"] {
        map.insert(k.to_owned(), json!(1));
    }
    assert_eq!(
        canonical_json(&Value::Object(map)),
        r#"{"A":1,"a":1,"b":1,"é":1}"#
    );
}

#[test]
fn fingerprint_changes_with_any_value() {
    let a = Fingerprint::of(&json!({"a": 1}));
    assert_ne!(a, Fingerprint::of(&json!({"a": 2})));
    assert_ne!(a, Fingerprint::of(&json!({"a": "1"})));
    assert_eq!(Fingerprint::from_hex(&a.to_hex()), Some(a));
    assert_eq!(Fingerprint::from_hex("zz"), None);
}
