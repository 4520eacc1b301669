//! A campaign on two virtual machines through the `qemu://` driver: each guest boots
//! `plugpull agent` from its `/init` (its secret and agent configuration on its own
//! ext4 disk), which verifies the run set the last cut interrupted and starts the
//! next, exactly as on hardware; the controller cuts both machines concurrently.

use super::{bundle, skip_without_vm};
use crate::campaign::Witness;
use plugpull_client::rig::vm::{self, machine, qemu, HostMount};
use plugpull_tests::simfs::skip_without_fuse;
use plugpull_tests::{bin, plugpull, stderr, stdout};
use serde_json::json;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// The guest's target, listed in its agent configuration.
const TARGET: &str = "/mnt/t.dat";

/// Turns the machine `uri` off when dropped.
struct Off(String);

impl Drop for Off {
    fn drop(&mut self) {
        let _ = plugpull(&["power", "--power", &self.0, "off"]);
    }
}

/// A machine for `host` in `w`'s dir, its image on a lying simfs mount when
/// `lying`, its guest booting `plugpull agent` against `w`'s listener; its URI.
fn agent_machine(w: &Witness, host: &str, lying: bool) -> String {
    let b = bundle();
    let port = w.listener.addr().rsplit_once(':').unwrap().1;
    let agent: Vec<String> = [
        "agent",
        "--listener",
        &format!("{}:{port}", vm::HOST_FROM_GUEST),
        "--secret-file",
        "/mnt/secret",
        "--config",
        "/mnt/agent.toml",
        "--host",
        host,
        "--poll",
        "0.5",
    ]
    .map(String::from)
    .to_vec();
    let root = w.path(host);
    let image = match lying {
        true => root.join("disk/disk.img"),
        false => root.join("disk.img"),
    };
    let spec = qemu::Spec {
        kernel: b.kernel,
        initrd: b.initrd,
        image,
        cache: "writeback".into(),
        settings: vm::settings(&agent, "hang", None),
        mem_mib: 512,
        cpus: 1,
    };
    let sd = lying.then(|| machine::SimDisk {
        bin: bin("plugpull-simfs"),
        mode: "lying".into(),
        seed: 5,
        args: vec!["--destage-delay-ms".into(), "1000".into()],
    });
    let dir = machine::create(&root, &spec, sd).unwrap();
    let backing = match lying {
        true => dir.join("backing/disk.img"),
        false => dir.join("disk.img"),
    };
    vm::make_image(&backing, 32).unwrap();
    // The agent's secret and allow-list on the guest's own disk, as on hardware.
    let m = HostMount::mount(&backing, &root.join("host")).unwrap();
    let put = |name: &str, from: &Path, mode: u32| {
        std::fs::copy(from, m.at.join(name)).unwrap();
        std::fs::set_permissions(m.at.join(name), std::fs::Permissions::from_mode(mode)).unwrap();
    };
    put("secret", &w.secret, 0o600);
    let config = root.join("agent.toml");
    std::fs::write(&config, format!("targets = [{TARGET:?}]\n")).unwrap();
    put("agent.toml", &config, 0o644);
    drop(m);
    format!("qemu://{}", dir.display())
}

/// Three cuts of each of two machines, an honest disk (plain image) and a lying one
/// (image on simfs, destage after 1 s), cut concurrently: a roll-up per host, the
/// honest machine's valid cuts all passed, the lying machine's all failed.
#[test]
fn a_campaign_cuts_two_machines_whose_agents_boot_from_init() {
    let test = "vm::campaign::a_campaign_cuts_two_machines_whose_agents_boot_from_init";
    if skip_without_vm(test) || skip_without_fuse(test) {
        return;
    }
    let _guests = super::heavy();
    let w = Witness::start(&[]);
    let honest = agent_machine(&w, "vm-honest", false);
    let lying = agent_machine(&w, "vm-lying", true);
    let _off = (Off(honest.clone()), Off(lying.clone()));
    let wl = format!("file --target {TARGET} --size 1MiB --block-size 4KiB");
    let mut args = vec!["--name", "vms", "--workload", &wl];
    args.extend(["--host", "vm-honest", "--power", &honest]);
    args.extend(["--host", "vm-lying", "--power", &lying]);
    args.extend(["--cuts", "3", "--cut-after", "4s..6s", "--off", "0s"]);
    args.extend(["--boot-timeout", "180s"]);
    let o = w.campaign("create", &args);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    for uri in [&honest, &lying] {
        let o = plugpull(&["power", "--power", uri, "on"]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    }
    let o = w.campaign("run", &["--name", "vms"]);
    let text = format!("{}\n{}", stdout(&o), stderr(&o));
    eprintln!("{text}");
    for line in [
        "vm-honest: 3 cuts: 3 valid (0 failed, 3 passed), 0 not measured, 0 invalid\n",
        "vm-lying: 3 cuts: 3 valid (3 failed, 0 passed), 0 not measured, 0 invalid\n",
    ] {
        assert!(text.contains(line), "{line}: {text}");
    }
    let v = w.status("vms");
    let (h, l) = (&v["hosts"][0], &v["hosts"][1]);
    assert_eq!(
        (&h["host"], &l["host"]),
        (&json!("vm-honest"), &json!("vm-lying"))
    );
    assert_eq!(h["roll_up"]["cuts"], json!(3), "{v}");
    assert_eq!(l["roll_up"]["cuts"], json!(3), "{v}");
    assert_eq!(
        (&h["roll_up"]["valid"], &h["roll_up"]["passed"]),
        (&json!(3), &json!(3)),
        "{v}\n{text}"
    );
    assert_eq!(
        (&l["roll_up"]["valid"], &l["roll_up"]["failed"]),
        (&json!(3), &json!(3)),
        "{v}\n{text}"
    );
}
