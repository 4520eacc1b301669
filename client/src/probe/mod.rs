//! The pre-flight probe's I/O: the timed flush loop ([`flush`]) and the cut-evidence snapshot ([`evidence`]).

pub mod evidence;
pub mod flush;
