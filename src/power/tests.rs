use super::*;

fn err(uri: &str) -> String {
    PowerUri::parse(uri).unwrap_err()
}

#[test]
fn ipmi_defaults_and_display() {
    let u = PowerUri::parse("ipmi://admin@bmc1?password-file=/etc/pp/bmc.pw").unwrap();
    assert_eq!(
        u,
        PowerUri::Ipmi {
            user: "admin".into(),
            host: "bmc1".into(),
            port: 623,
            password_file: "/etc/pp/bmc.pw".into(),
            cipher: None
        }
    );
    assert_eq!(u.kind(), CutKind::Dc);
    assert_eq!(
        u.to_string(),
        "ipmi://admin@bmc1:623?password-file=/etc/pp/bmc.pw"
    );
}

#[test]
fn ipmi_cipher() {
    let u = PowerUri::parse("ipmi://a@b:6230?password-file=p&cipher=3").unwrap();
    assert!(matches!(
        u,
        PowerUri::Ipmi {
            cipher: Some(3),
            ..
        }
    ));
    assert_eq!(u.to_string(), "ipmi://a@b:6230?password-file=p&cipher=3");
    assert_eq!(
        err("ipmi://a@b?password-file=p&cipher=18"),
        "ipmi: `cipher` must be an RMCP+ cipher suite, 0 to 17"
    );
}

#[test]
fn redfish_schemes() {
    let u =
        PowerUri::parse("redfish://root@[::1]:8443/redfish/v1/Systems/1/?password-file=p&insecure")
            .unwrap();
    assert_eq!(
        u,
        PowerUri::Redfish {
            user: "root".into(),
            host: "::1".into(),
            port: 8443,
            system: "/redfish/v1/Systems/1".into(),
            password_file: "p".into(),
            plain_http: false,
            insecure: true
        }
    );
    assert_eq!(
        u.to_string(),
        "redfish://root@[::1]:8443/redfish/v1/Systems/1?password-file=p&insecure"
    );
    let h = PowerUri::parse("redfish+http://a@h/redfish/v1/Systems/X?password-file=p").unwrap();
    assert!(matches!(
        h,
        PowerUri::Redfish {
            port: 80,
            plain_http: true,
            ..
        }
    ));
    assert_eq!(
        err("redfish://a@h/redfish/v1/Systems/?password-file=p"),
        "redfish: needs the system's path: redfish://USER@BMC[:PORT]/redfish/v1/Systems/ID?password-file=F"
    );
}

#[test]
fn snmp_values() {
    let u = PowerUri::parse("apc-snmp://pdu:1161/7?community-file=c&on=2&off=1").unwrap();
    assert_eq!(
        u,
        PowerUri::ApcSnmp {
            host: "pdu".into(),
            port: 1161,
            outlet: 7,
            community_file: "c".into(),
            on_value: 2,
            off_value: 1
        }
    );
    assert_eq!(u.kind(), CutKind::Ac);
    assert_eq!(
        err("apc-snmp://private@pdu/1?community-file=c"),
        "apc-snmp: the community must come from a file, not the URI: apc-snmp://PDU/OUTLET?community-file=F"
    );
    assert_eq!(
        err("apc-snmp://pdu/0?community-file=c"),
        "apc-snmp: needs an outlet number from 1: apc-snmp://PDU/OUTLET?community-file=F"
    );
    assert_eq!(
        err("apc-snmp://pdu/1?community-file=c&on=1&off=1"),
        "apc-snmp: `on` and `off` must differ (both 1)"
    );
}

#[test]
fn plugs_and_simfs() {
    assert_eq!(
        PowerUri::parse("tasmota://plug").unwrap(),
        PowerUri::Tasmota {
            host: "plug".into(),
            port: 80,
            relay: None
        }
    );
    assert_eq!(
        PowerUri::parse("shelly://10.0.0.5:8080/2")
            .unwrap()
            .to_string(),
        "shelly://10.0.0.5:8080/2"
    );
    assert_eq!(
        PowerUri::parse("simfs:///mnt/sim").unwrap(),
        PowerUri::Simfs {
            mountpoint: "/mnt/sim".into()
        }
    );
    let q = PowerUri::parse("qemu:///var/lib/vm1").unwrap();
    assert_eq!(
        q,
        PowerUri::Qemu {
            dir: "/var/lib/vm1".into(),
            reset: false
        }
    );
    assert_eq!(
        (q.kind().to_string(), q.to_string()),
        ("vm".into(), "qemu:///var/lib/vm1".into())
    );
    // A path, not a host: an `@` or `:` in it is part of the directory.
    assert_eq!(
        PowerUri::parse("qemu:///srv/vm@1:a").unwrap(),
        PowerUri::Qemu {
            dir: "/srv/vm@1:a".into(),
            reset: false
        }
    );
    // `cut=reset`: QMP system_reset, the disk keeps power; `cut=kill` is the default.
    let r = PowerUri::parse("qemu:///var/lib/vm1?cut=reset").unwrap();
    assert_eq!(
        (r.kind(), r.kind().to_string(), r.to_string()),
        (
            CutKind::Reset,
            "reset".into(),
            "qemu:///var/lib/vm1?cut=reset".into()
        )
    );
    let k = PowerUri::parse("qemu:///var/lib/vm1?cut=kill").unwrap();
    assert_eq!(
        (k.kind(), k.to_string()),
        (CutKind::Vm, "qemu:///var/lib/vm1".into())
    );
    assert_eq!(
        err("qemu:///var/lib/vm1?cut=halt"),
        "qemu: `cut` must be kill (QEMU killed: a power cut) or reset (QMP system_reset: the disk keeps power), not `halt`"
    );
    assert_eq!(
        err("qemu:///var/lib/vm1?cut"),
        "qemu: `cut` must be kill (QEMU killed: a power cut) or reset (QMP system_reset: the disk keeps power), not ``"
    );
    assert_eq!(
        err("qemu://"),
        "qemu: needs the machine's directory: qemu:///var/lib/vm1"
    );
    assert_eq!(
        err("tasmota://plug/x"),
        "tasmota: the relay must be a number, not `x`"
    );
}

#[test]
fn secrets_are_refused_and_never_echoed() {
    let e = err("ipmi://admin:hunter2@bmc?password-file=p");
    assert_eq!(
        e,
        "ipmi: a password in the URI is refused: put it in a file and use ?password-file=F"
    );
    assert!(!e.contains("hunter2"));
    assert_eq!(
        err("ipmi://admin@bmc"),
        "ipmi: needs ?password-file=FILE (secrets come only from files)"
    );
    assert_eq!(
        err("ipmi://admin@bmc?password-file=p&x=1"),
        "ipmi: unknown parameter `x`"
    );
    assert_eq!(
        err("ipmi://bmc?password-file=p"),
        "ipmi: needs a user: ipmi://USER@HOST..."
    );
    assert_eq!(
        err("ipmi://a@bmc:99999?password-file=p"),
        "ipmi: bad port `99999`"
    );
    assert!(err("ftp://x").starts_with("unknown power scheme `ftp`"));
    assert!(err("bmc1").starts_with("not a power URI"));
    assert_eq!(err("exec:  "), "exec: needs a command: exec:CMD");
    assert_eq!(
        err("exec+usb:relay {action}"),
        "`exec+usb:`: expected exec:, exec+ac:, exec+dc: or exec+device:"
    );
}

/// `exec+KIND:` declares what the command cuts; the URI prints back as given.
#[test]
fn exec_declares_its_cut_kind() {
    for (uri, kind) in [
        ("exec:relay {action}", CutKind::Ac),
        ("exec+dc:fence_ipmilan -o {action}", CutKind::Dc),
        (
            "exec+device:/usr/local/bin/slot-power 3 {action}",
            CutKind::Device,
        ),
    ] {
        let u = PowerUri::parse(uri).unwrap();
        assert_eq!(
            (u.kind(), u.scheme(), u.to_string()),
            (kind, "exec", uri.to_string())
        );
    }
}

#[test]
fn answers() {
    assert_eq!(ipmi_state("Chassis Power is on\n"), PowerState::On);
    assert_eq!(ipmi_state("Chassis Power is off\n"), PowerState::Off);
    assert_eq!(ipmi_state("weird"), PowerState::Unknown("weird".into()));
    assert_eq!(text_state(" OFF\n"), PowerState::Off);
    assert_eq!(snmp_state("1\n", 1, 2), PowerState::On);
    assert_eq!(snmp_state("INTEGER: 2", 1, 2), PowerState::Off);
    assert_eq!(snmp_state("2", 2, 1), PowerState::On);
    assert_eq!(snmp_state("3", 1, 2), PowerState::Unknown("3".into()));
    assert_eq!(
        redfish_state(r#"{"PowerState":"Off"}"#),
        Ok(PowerState::Off)
    );
    assert_eq!(
        redfish_state(r#"{"PowerState":"PoweringOn"}"#),
        Ok(PowerState::Unknown("PoweringOn".into()))
    );
    assert_eq!(tasmota_state(r#"{"POWER":"ON"}"#, None), Ok(PowerState::On));
    assert_eq!(
        tasmota_state(r#"{"POWER1":"OFF"}"#, Some(1)),
        Ok(PowerState::Off)
    );
    assert_eq!(
        tasmota_state(r#"{"POWER1":"OFF"}"#, Some(2)),
        Err(r#"no POWER2 in the answer: {"POWER1":"OFF"}"#.into())
    );
    assert_eq!(
        shelly_status(r#"{"id":0,"output":false,"apower":0.0}"#),
        Ok((PowerState::Off, Some(0.0)))
    );
}

#[test]
fn secrets_holding_uri_delimiters_are_refused_quoting_nothing() {
    let pw = "redfish: a password in the URI is refused: put it in a file and use ?password-file=F";
    let cases = [
        ("redfish://root:Zx9/q+w@bmc/redfish/v1/Systems/1?password-file=p", pw, "Zx9/q+w"),
        ("redfish://root:Qx#Zk@bmc/redfish/v1/Systems/1?password-file=p", pw, "Qx#Zk"),
        ("redfish://root:Pq@Wv@bmc/redfish/v1/Systems/1?password-file=p", pw, "Pq@Wv"),
        (
            "ipmi://admin:s3cr?et@bmc",
            "ipmi: a password in the URI is refused: put it in a file and use ?password-file=F",
            "s3cr?et",
        ),
        (
            "apc-snmp://pub/lic@pdu/1",
            "apc-snmp: the community must come from a file, not the URI: apc-snmp://PDU/OUTLET?community-file=F",
            "pub/lic",
        ),
        (
            "apc-snmp://Pu?Bx#Lz@Ic@pdu/1?community-file=f",
            "apc-snmp: the community must come from a file, not the URI: apc-snmp://PDU/OUTLET?community-file=F",
            "Pu?Bx#Lz@Ic",
        ),
        ("tasmota://Tt:Kk/Jj@plug/1", "tasmota: takes no user or password", "Kk/Jj"),
    ];
    for (uri, want, secret) in cases {
        let e = err(uri);
        assert_eq!(e, want, "{uri}");
        for part in secret.split(['/', '?', '#', '@']) {
            assert!(!e.contains(part), "{uri}: {e}");
        }
    }
    // An `@` in a file path is not a user.
    let u = PowerUri::parse("apc-snmp://pdu:1161/3?community-file=/run/user@1000/c").unwrap();
    assert_eq!(
        u.to_string(),
        "apc-snmp://pdu:1161/3?community-file=/run/user@1000/c&on=1&off=2"
    );
}

#[test]
fn tasmota_relay_zero_is_refused() {
    assert_eq!(
        err("tasmota://plug/0"),
        "tasmota: relay 0 would switch every relay (Power0): give one relay from 1, or none for a single-relay plug"
    );
}

#[test]
fn exec_status_accepts_fence_agent_spelling() {
    assert_eq!(text_state("Status: ON\n"), PowerState::On);
    assert_eq!(text_state("status:off"), PowerState::Off);
    assert_eq!(text_state(" OFF \n"), PowerState::Off);
    assert_eq!(
        text_state("Status: UNKNOWN\n"),
        PowerState::Unknown("Status: UNKNOWN".into())
    );
}
