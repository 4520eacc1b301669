use super::*;

/// `x` equals `want` to the precision `want` was written with (half a unit of its
/// last digit): the published values are rounded.
fn close(x: f64, want: f64, decimals: i32) {
    let tol = 0.5 * 10f64.powi(-decimals) + 1e-12;
    assert!((x - want).abs() <= tol, "{x} is not {want} (±{tol})");
}

#[test]
fn one_sided_bound_for_no_failure_matches_the_published_values() {
    for (n, want) in [
        (5, 45.1),
        (10, 25.9),
        (20, 13.9),
        (30, 9.5),
        (50, 5.8),
        (100, 2.95),
        (300, 1.0),
    ] {
        let b = failure_rate(0, n, 0.95).unwrap().unwrap();
        let decimals = if n == 100 { 2 } else { 1 };
        close(b.upper_one_sided * 100.0, want, decimals);
        assert_eq!(b.lower, 0.0);
        assert_eq!(b.estimate, 0.0);
    }
}

#[test]
fn two_sided_upper_for_no_failure_matches_the_published_values() {
    for (n, want) in [(10, 30.8), (30, 11.6), (100, 3.6)] {
        let b = failure_rate(0, n, 0.95).unwrap().unwrap();
        close(b.upper * 100.0, want, 1);
    }
}

#[test]
fn the_closed_form_agrees_with_the_beta_quantile() {
    // Beta(1, n)'s quantile, computed by statrs, against 1 − α^(1/n).
    for n in [1u32, 5, 30, 300, 5000] {
        let b = failure_rate(0, n, 0.95).unwrap().unwrap();
        let q = beta_quantile(1.0, f64::from(n), 0.95);
        assert!(
            (b.upper_one_sided - q).abs() < 1e-9,
            "n={n}: {} vs {q}",
            b.upper_one_sided
        );
    }
}

#[test]
fn clopper_pearson_with_failures_matches_scipy() {
    // SciPy 1.x: beta.ppf(0.025, 5, 26) = 0.0564216965, beta.ppf(0.975, 6, 25) =
    // 0.3472116988, beta.ppf(0.05, 5, 26) = 0.0680555736 (the one-sided lower bound);
    // beta.ppf(0.025, 1, 10) = 0.002528579, beta.ppf(0.975, 2, 9) = 0.445016117.
    let b = failure_rate(5, 30, 0.95).unwrap().unwrap();
    close(b.lower, 0.0564216965, 10);
    close(b.upper, 0.3472116988, 10);
    close(b.lower_one_sided, 0.0680555736, 10);
    close(b.estimate, 5.0 / 30.0, 12);
    let b = failure_rate(1, 10, 0.95).unwrap().unwrap();
    close(b.lower, 0.002528579, 9);
    close(b.upper, 0.445016117, 9);
    // All failed: the upper end is 1, the lower end α/2^(1/n).
    let b = failure_rate(4, 4, 0.95).unwrap().unwrap();
    assert_eq!((b.upper, b.upper_one_sided), (1.0, 1.0));
    close(b.lower, 0.025f64.powf(0.25), 9);
}

#[test]
fn nothing_measured_gives_no_bound_and_bad_input_is_refused() {
    assert_eq!(failure_rate(0, 0, 0.95), Ok(None));
    assert_eq!(
        failure_rate(3, 2, 0.95),
        Err("3 failed cuts of 2 valid cuts".to_string())
    );
    assert_eq!(
        failure_rate(0, 2, 1.0),
        Err("the confidence level must be above 0 and below 1 (or above 0 % and below 100 %), not 1".to_string())
    );
}

#[test]
fn the_sentences_read_as_published() {
    let b = failure_rate(0, 30, 0.95).unwrap().unwrap();
    assert_eq!(
        b.sentence(),
        "0 of 30 valid cuts failed: the loss rate per cut is below 9.51 % with 95 % confidence"
    );
    let b = failure_rate(5, 30, 0.95).unwrap().unwrap();
    assert_eq!(
        b.sentence(),
        "5 of 30 valid cuts failed (16.7 %; 95 % interval 5.64 %–34.8 %): the loss rate per cut is \
         at least 6.8 % with 95 % confidence"
    );
}

#[test]
fn the_planner_matches_the_published_values() {
    for (rate, want) in [(0.25, 11), (0.10, 29), (0.05, 59), (0.01, 299)] {
        assert_eq!(cuts_needed(rate, 0.95), Ok(want), "rate {rate}");
    }
    // A whole number of cuts is not rounded up by float error: 0.5² = 0.25.
    assert_eq!(cuts_needed(0.5, 0.75), Ok(2));
    close(rate_shown(60, 0.95).unwrap() * 100.0, 4.9, 1);
    // The planner and the bound agree: n cuts show the rate below the rate they plan for.
    for rate in [0.25, 0.1, 0.05, 0.01] {
        let n = cuts_needed(rate, 0.95).unwrap();
        assert!(rate_shown(n, 0.95).unwrap() <= rate);
        assert!(rate_shown(n - 1, 0.95).unwrap() > rate);
    }
    // Tiny rates: ln_1p keeps them exact, and a rate no campaign can reach is refused.
    assert_eq!(cuts_needed(1e-9, 0.95), Ok(2995732273));
    assert_eq!(
        cuts_needed(1e-17, 0.95),
        Err(format!(
            "a rate of 0.00000000000000001 needs more than {} cuts",
            u32::MAX
        ))
    );
    assert_eq!(
        cuts_needed(0.0, 0.95),
        Err(
            "the failure rate must be above 0 and below 1 (or above 0 % and below 100 %), not 0"
                .to_string()
        )
    );
    assert_eq!(
        rate_shown(0, 0.95),
        Err("0 cuts show nothing: give at least 1 cut".to_string())
    );
}

#[test]
fn fisher_matches_the_published_values() {
    let f = fisher_exact(5, 30, 0, 30).unwrap();
    assert_eq!(f.table, [[5, 25], [0, 30]]);
    // One-sided: C(30,5)/C(60,5) = 142506/5461512; two-sided: twice that (symmetric).
    close(f.a_worse, 142506.0 / 5461512.0, 12);
    close(f.two_sided, 2.0 * 142506.0 / 5461512.0, 12);
    close(f.two_sided, 0.052, 3);
    close(f.a_worse, 0.026, 3);
    close(f.b_worse, 1.0, 12);
    let f = fisher_exact(3, 10, 0, 10).unwrap();
    close(f.two_sided, 0.21, 2);
    close(f.two_sided, 2.0 * 120.0 / 1140.0, 12);
    let f = fisher_exact(8, 50, 1, 50).unwrap();
    close(f.two_sided, 0.031, 3);
    // SciPy 1.x fisher_exact([[8, 42], [1, 49]]): 0.030857822974 (greater: 0.015428911487).
    close(f.two_sided, 0.030857822974, 12);
    close(f.a_worse, 0.015428911487, 12);
    // Equal tables: nothing to tell.
    let f = fisher_exact(2, 20, 2, 20).unwrap();
    close(f.two_sided, 1.0, 9);
    assert!(fisher_exact(3, 2, 0, 1).is_err());
    assert_eq!(
        fisher_exact(0, 0, 1, 5),
        Err("a side without a valid cut: nothing to compare".to_string())
    );
    // Unequal sizes, SciPy 1.x fisher_exact([[3, 2], [1, 19]]): two-sided = greater =
    // 0.0162055336.
    let f = fisher_exact(3, 5, 1, 20).unwrap();
    close(f.two_sided, 0.0162055336, 10);
    close(f.a_worse, 0.0162055336, 10);
}

#[test]
fn fisher_sentences() {
    let f = fisher_exact(0, 3, 0, 60).unwrap();
    assert_eq!(
        f.sentence("a", "b", 0.05),
        "a: 0 of 3 cuts failed, b: 0 of 60 cuts failed: the same observed rate; the test finds no \
         difference (two-sided p = 1), which does not show they are equal"
    );
    let f = fisher_exact(5, 30, 0, 30).unwrap();
    assert_eq!(
        f.sentence("nobarrier", "barrier", 0.05),
        "nobarrier: 5 of 30 cuts failed, barrier: 0 of 30 cuts failed: nobarrier failed more often \
         than barrier, but the difference is not significant at the 5 % level (two-sided p = 0.0522); \
         more cuts can tell"
    );
    let f = fisher_exact(1, 50, 8, 50).unwrap();
    assert_eq!(
        f.sentence("a", "b", 0.05),
        "a: 1 of 50 cuts failed, b: 8 of 50 cuts failed: b fails more often than a, significant at \
         the 5 % level (two-sided p = 0.0309)"
    );
}

#[test]
fn percentages_have_three_significant_digits() {
    assert_eq!(percent(0.09503), "9.5 %");
    assert_eq!(percent(0.0295), "2.95 %");
    assert_eq!(percent(0.451), "45.1 %");
    assert_eq!(percent(1.0), "100 %");
    assert_eq!(percent(0.009937), "0.994 %");
    assert_eq!(pvalue(0.210526), "0.211");
    // Bounds round away from what they bound: never a stronger claim than computed.
    assert_eq!(percent_up(0.09503385), "9.51 %");
    assert_eq!(percent_up(0.095), "9.5 %");
    assert_eq!(percent_up(0.7763932), "77.7 %");
    assert_eq!(percent_up(0.009937), "0.994 %");
    assert_eq!(percent_up(1.0), "100 %");
    assert_eq!(percent_down(0.06805557), "6.8 %");
    assert_eq!(percent_down(0.2236068), "22.3 %");
    assert_eq!(percent_down(0.0), "0 %");
}

#[test]
fn fractions_and_plan_sentences() {
    assert_eq!(parse_fraction("0.1"), Ok(0.1));
    assert_eq!(parse_confidence("99%"), Ok(0.99));
    assert_eq!(
        parse_confidence("0.95%"),
        Err(
            "\"0.95%\" is a confidence level of 0.95 %: give at least 50 % (0.95 or 95%)"
                .to_string()
        )
    );
    assert_eq!(parse_fraction("10%"), Ok(0.1));
    assert_eq!(parse_fraction(" 95 % "), Ok(0.95));
    assert_eq!(
        parse_fraction("ten"),
        Err("\"ten\" is not a fraction (0.1) or a percentage (10%)".to_string())
    );
    assert_eq!(
        parse_fraction("100%"),
        Err("\"100%\" must be above 0 and below 1 (or above 0 % and below 100 %)".to_string())
    );
    assert_eq!(
        parse_fraction("0"),
        Err("\"0\" must be above 0 and below 1 (or above 0 % and below 100 %)".to_string())
    );
    assert_eq!(
        plan_sentence(60, 0.95).unwrap(),
        "60 valid cuts with none failed would show the loss rate per cut is below 4.88 % with 95 % confidence"
    );
    assert_eq!(
        need_sentence(0.1, 0.95).unwrap(),
        "to see at least one failed cut with 95 % confidence when 10 % of cuts lose acknowledged writes: 29 valid cuts"
    );
}
