//! The files workload on simfs, cut under load: honest mode passes; lying mode's
//! findings are exactly the names whose acknowledged content the ground truth says
//! was dropped. (Until the simfs metadata journal lands, simfs passes metadata
//! straight through, so only content can be lost; the journal's own assertions —
//! lost creates, renames and unlinks — are added with it.)
