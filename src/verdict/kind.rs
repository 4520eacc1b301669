//! One verdict vocabulary for every workload that judges units one by one: a
//! [`VerdictKind`] (the file workload's per-block [`super::Verdict`], the files
//! workload's per-name [`super::files::FilesVerdict`]) and [`Counts`], how many units
//! got each class.
//!
//! A kind is declared with [`verdict_kind!`](crate::verdict_kind): the enum, its
//! classes in report order, their snake_case names (JSON and reports) and which of
//! them fail a run, in one place. pgbench is judged by commit and by page, not unit by
//! unit; its counts are named ([`super::pgbench::Failures`]).

use serde::de::{MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::marker::PhantomData;

/// Most classes a kind may have (the size of [`Counts`]' table).
pub const MAX_CLASSES: usize = 12;

/// A class of verdict a workload gives each unit it checks.
pub trait VerdictKind: Copy + Eq + fmt::Debug + 'static {
    /// Every class, in report order; the first is the good one (`intact`). At most
    /// [`MAX_CLASSES`].
    const ALL: &'static [Self];

    /// The snake_case name used in JSON and reports (`lost_write`).
    fn name(self) -> &'static str;

    /// Whether the class means something acknowledged was lost or damaged.
    fn is_failure(self) -> bool;

    /// Its position in [`VerdictKind::ALL`].
    fn index(self) -> usize {
        Self::ALL
            .iter()
            .position(|&v| v == self)
            .expect("every class is in ALL")
    }

    /// The class named `name` ([`VerdictKind::name`]), if any.
    fn from_name(name: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|v| v.name() == name)
    }
}

/// Declares a [`VerdictKind`]: the enum (with the given attributes and docs), `ALL`,
/// `name`, `is_failure` and a `Display` that writes the name. Each class is
/// `Variant = "name"`, followed by `fails` when it is a failure.
#[macro_export]
macro_rules! verdict_kind {
    (
        $(#[$meta:meta])*
        pub enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident = $text:literal $($fails:ident)?, )+
        }
    ) => {
        $(#[$meta])*
        pub enum $name {
            $( $(#[$vmeta])* $variant, )+
        }

        impl $crate::verdict::VerdictKind for $name {
            const ALL: &'static [$name] = &[$($name::$variant),+];

            fn name(self) -> &'static str {
                match self {
                    $( $name::$variant => $text, )+
                }
            }

            fn is_failure(self) -> bool {
                match self {
                    $( $name::$variant => $crate::verdict_kind!(@fails $($fails)?), )+
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str($crate::verdict::VerdictKind::name(*self))
            }
        }
    };
    (@fails fails) => { true };
    (@fails) => { false };
}

/// Units per class of `V`: each checked unit counted once.
///
/// JSON: an object with every class's name and count, in report order
/// (`{"intact": 3, "lost_write": 1, …}`); reading one, a missing class is 0 and an
/// unknown name is an error that names it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Counts<V> {
    n: [u64; MAX_CLASSES],
    kind: PhantomData<V>,
}

impl<V: VerdictKind> Default for Counts<V> {
    fn default() -> Self {
        Counts {
            n: [0; MAX_CLASSES],
            kind: PhantomData,
        }
    }
}

impl<V: VerdictKind> Counts<V> {
    /// Counts holding `pairs` (class, units); the rest 0.
    pub fn of(pairs: &[(V, u64)]) -> Self {
        let mut c = Self::default();
        for &(v, n) in pairs {
            *c.get_mut(v) += n;
        }
        c
    }

    /// The counter of `v`.
    pub fn get_mut(&mut self, v: V) -> &mut u64 {
        &mut self.n[v.index()]
    }

    /// The count of `v`.
    pub fn get(&self, v: V) -> u64 {
        self.n[v.index()]
    }

    /// Every class with its count, in report order.
    pub fn iter(&self) -> impl Iterator<Item = (V, u64)> + '_ {
        V::ALL.iter().map(|&v| (v, self.get(v)))
    }

    /// Units with a failure class ([`VerdictKind::is_failure`]).
    pub fn failures(&self) -> u64 {
        self.iter()
            .filter(|(v, _)| v.is_failure())
            .map(|(_, n)| n)
            .sum()
    }

    /// All units counted.
    pub fn total(&self) -> u64 {
        self.iter().map(|(_, n)| n).sum()
    }

    /// The verdict table as text lines: a head `verdict` / `unit` (`blocks`, `names`),
    /// then each class's name (spaces for `_`) and count, `  FAILURE` after a
    /// non-zero count of a class `fails` says fails the run.
    pub fn table(&self, unit: &str, fails: impl Fn(V) -> bool) -> Vec<String> {
        let mut lines = vec![format!("{:<20} {:>12}", "verdict", unit)];
        for (v, n) in self.iter() {
            let note = if fails(v) && n > 0 { "  FAILURE" } else { "" };
            lines.push(format!(
                "{:<20} {:>12}{note}",
                v.name().replace('_', " "),
                n
            ));
        }
        lines
    }

    /// Each class's name and count, in report order, as strings (the HTML page's
    /// verdict table).
    pub fn rows(&self) -> Vec<(String, String)> {
        self.iter()
            .map(|(v, n)| (v.name().to_string(), n.to_string()))
            .collect()
    }
}

impl<V: VerdictKind> fmt::Debug for Counts<V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.iter().map(|(v, n)| (v.name(), n)))
            .finish()
    }
}

impl<V: VerdictKind> Serialize for Counts<V> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(V::ALL.len()))?;
        for (v, n) in self.iter() {
            m.serialize_entry(v.name(), &n)?;
        }
        m.end()
    }
}

impl<'de, V: VerdictKind> Deserialize<'de> for Counts<V> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct CountsVisitor<V>(PhantomData<V>);
        impl<'de, V: VerdictKind> Visitor<'de> for CountsVisitor<V> {
            type Value = Counts<V>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a map of verdict names to counts")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Counts<V>, A::Error> {
                let mut c = Counts::default();
                while let Some((name, n)) = map.next_entry::<String, u64>()? {
                    let v = V::from_name(&name).ok_or_else(|| {
                        let names: Vec<&str> = V::ALL.iter().map(|v| v.name()).collect();
                        serde::de::Error::custom(format!(
                            "unknown verdict {name:?} (expected one of: {})",
                            names.join(", ")
                        ))
                    })?;
                    *c.get_mut(v) = n;
                }
                Ok(c)
            }
        }
        d.deserialize_map(CountsVisitor(PhantomData))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verdict::files::FilesVerdict;
    use crate::verdict::Verdict;

    #[test]
    fn counts_serialize_in_report_order_and_read_back() {
        let c = Counts::of(&[(Verdict::Intact, 3), (Verdict::LostWrite, 1)]);
        let json = serde_json::to_string(&c).unwrap();
        assert_eq!(
            json,
            r#"{"intact":3,"lost_write":1,"torn_in_flight":0,"torn_acknowledged":0,"corrupt":0,"misdirected":0,"unserializable":0,"missing":0}"#
        );
        assert_eq!(serde_json::from_str::<Counts<Verdict>>(&json).unwrap(), c);
        assert_eq!((c.failures(), c.total()), (1, 4));
        assert_eq!(
            c.table("blocks", |v| v.is_failure())[..4],
            [
                "verdict                    blocks",
                "intact                          3",
                "lost write                      1  FAILURE",
                "torn in flight                  0",
            ]
        );
        assert_eq!(
            c.table("blocks", |_| true)[4],
            "torn acknowledged               0",
            "a failing class counted 0 is not marked"
        );
        assert_eq!(c.rows()[1], ("lost_write".to_string(), "1".to_string()));
        assert_eq!(
            format!("{:?}", Counts::of(&[(FilesVerdict::Stale, 1)])),
            r#"{"intact": 0, "lost_file": 0, "resurrected": 0, "wrong_size": 0, "zero_length": 0, "stale_rename": 0, "torn": 0, "corrupt": 0, "stale": 1}"#
        );
        assert_eq!(
            (
                format!("{}", Verdict::TornInFlight),
                Verdict::from_name("missing")
            ),
            ("torn_in_flight".to_string(), Some(Verdict::Missing))
        );
    }

    #[test]
    fn a_missing_class_reads_as_zero_and_an_unknown_one_is_named() {
        let c: Counts<FilesVerdict> = serde_json::from_str(r#"{"torn":2}"#).unwrap();
        assert_eq!(c, Counts::of(&[(FilesVerdict::Torn, 2)]));
        let e = serde_json::from_str::<Counts<FilesVerdict>>(r#"{"lost_write":1}"#)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with(
                "unknown verdict \"lost_write\" (expected one of: intact, lost_file, resurrected, \
                 wrong_size, zero_length, stale_rename, torn, corrupt, stale)"
            ),
            "{e}"
        );
    }

    #[test]
    fn counts_read_only_from_a_map() {
        let e = serde_json::from_str::<Counts<Verdict>>("5")
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "invalid type: integer `5`, expected a map of verdict names to counts at line 1 column 1"
        );
    }

    #[test]
    fn files_counts_flatten_beside_unpromised_and_read_back() {
        let c = crate::verdict::files::FilesCounts {
            by_verdict: Counts::of(&[(FilesVerdict::Torn, 2), (FilesVerdict::Intact, 5)]),
            unpromised: 1,
        };
        let json = serde_json::to_string(&c).unwrap();
        assert_eq!(
            json,
            r#"{"intact":5,"lost_file":0,"resurrected":0,"wrong_size":0,"zero_length":0,"stale_rename":0,"torn":2,"corrupt":0,"stale":0,"unpromised":1}"#
        );
        let back: crate::verdict::files::FilesCounts = serde_json::from_str(&json).unwrap();
        assert_eq!((back.clone(), back.failures()), (c, 1));
    }

    #[test]
    fn every_kind_has_at_most_max_classes_and_fails_all_but_intact_as_declared() {
        assert!(Verdict::ALL.len() <= MAX_CLASSES && FilesVerdict::ALL.len() <= MAX_CLASSES);
        let failing: Vec<&str> = Verdict::ALL
            .iter()
            .filter(|v| v.is_failure())
            .map(|v| v.name())
            .collect();
        assert_eq!(
            failing,
            [
                "lost_write",
                "torn_acknowledged",
                "corrupt",
                "misdirected",
                "unserializable",
                "missing"
            ]
        );
        assert_eq!(
            FilesVerdict::ALL.iter().filter(|v| v.is_failure()).count(),
            8
        );
    }
}
