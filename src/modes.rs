//! The enumerated settings a run's manifest records: the file workload's durability
//! call and write pattern, and pgbench's query protocol.
//!
//! Each is stored in the manifest (wire and ledger) as its name, the string the
//! command line takes (`fdatasync`, `direct-dsync`, `prepared`, …), so the postcard
//! encoding is that of a `String`; a name this version does not know is a decoding
//! error that names the value. With the `clap` feature each derives
//! `clap::ValueEnum`, so the command line takes the same names.

use serde::{Deserialize, Serialize};

macro_rules! named_enum {
    (
        $(#[$meta:meta])*
        pub enum $name:ident { $( $(#[$vmeta:meta])* $variant:ident = $text:literal, )+ }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
        #[serde(into = "String", try_from = "String")]
        #[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
        pub enum $name {
            $( $(#[$vmeta])* $variant, )+
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The name the command line takes and the manifest stores.
            pub fn name(self) -> &'static str {
                match self {
                    $( $name::$variant => $text, )+
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.name())
            }
        }

        impl std::str::FromStr for $name {
            type Err = String;
            /// Errors: a name that is none of the values, naming the value and the
            /// accepted ones.
            fn from_str(s: &str) -> Result<Self, String> {
                $name::ALL.iter().copied().find(|v| v.name() == s).ok_or_else(|| {
                    let names: Vec<&str> = $name::ALL.iter().map(|v| v.name()).collect();
                    format!(
                        "unknown {} {s:?} (expected one of: {})",
                        stringify!($name),
                        names.join(", ")
                    )
                })
            }
        }

        impl From<$name> for String {
            fn from(v: $name) -> String {
                v.name().to_string()
            }
        }

        impl TryFrom<String> for $name {
            type Error = String;
            fn try_from(s: String) -> Result<Self, String> {
                s.parse()
            }
        }
    };
}

named_enum! {
    /// How the file workload makes each write durable.
    pub enum SyncMode {
        /// `pwrite` then `fdatasync`.
        Fdatasync = "fdatasync",
        /// `pwrite` then `fsync`.
        Fsync = "fsync",
        /// `pwrite` on a file opened `O_DSYNC`.
        Dsync = "dsync",
        /// `pwrite` on a file opened `O_DIRECT | O_DSYNC` (bypasses the page cache).
        DirectDsync = "direct-dsync",
    }
}

named_enum! {
    /// Which block each file-workload worker writes next.
    pub enum Pattern {
        /// Uniformly random among the worker's blocks.
        Random = "random",
        /// The worker's blocks in order, wrapping around.
        Sequential = "sequential",
    }
}

named_enum! {
    /// How `write file --expect-atomic` issues its writes (`docs/atomic.md`).
    pub enum AtomicMode {
        /// Plain writes: the device's natural behaviour.
        None = "none",
        /// Each write asked of the kernel as one untorn write (`RWF_ATOMIC`, Linux
        /// 6.11+, `man 2 pwritev2`): refused where the file, filesystem or device
        /// does not offer the size.
        Rwf = "rwf",
    }
}

named_enum! {
    /// pgbench's query protocol, as its `-M`.
    pub enum Protocol {
        /// Each statement as text with the values in it (simple query protocol).
        Simple = "simple",
        /// Statements prepared once per connection, then bound and executed.
        Prepared = "prepared",
    }
}

impl Default for Protocol {
    /// `simple`, pgbench's default.
    fn default() -> Self {
        Protocol::Simple
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_setting_is_stored_as_its_name_and_an_unknown_name_is_refused() {
        let bytes = postcard::to_allocvec(&SyncMode::DirectDsync).unwrap();
        assert_eq!(bytes, postcard::to_allocvec(&"direct-dsync").unwrap());
        assert_eq!(
            postcard::from_bytes::<SyncMode>(&bytes).unwrap(),
            SyncMode::DirectDsync
        );
        let bad = postcard::to_allocvec(&"osync").unwrap();
        assert!(postcard::from_bytes::<SyncMode>(&bad).is_err());
        assert_eq!(
            "osync".parse::<SyncMode>().unwrap_err(),
            "unknown SyncMode \"osync\" (expected one of: fdatasync, fsync, dsync, direct-dsync)"
        );
        assert_eq!("sequential".parse::<Pattern>(), Ok(Pattern::Sequential));
        assert_eq!(Protocol::Prepared.to_string(), "prepared");
    }
}
