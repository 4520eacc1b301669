//! The pre-flight probe's pure parts: flush accounting ([`flush`]) and cut evidence ([`evidence`]).

pub mod evidence;
pub mod flush;
