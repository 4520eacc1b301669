//! The campaigns this listener keeps (`docs/campaign.md`): one file per campaign,
//! `<data-dir>/campaigns/<name>.campaign`, in the format of
//! `plugpull::campaign::record` (a definition line, then one line per event). Every
//! append is written and `fdatasync`ed before it is answered; creating a campaign
//! also syncs the directory. At start every file is read back, a torn last line cut
//! off (kept beside it as `<name>.campaign.torn-<offset>`); a damaged campaign is
//! refused by name, the others are served. An append that does not follow the
//! campaign's order (`Campaign::check_append`: two controllers racing) is refused.

use plugpull::campaign::{record, Campaign, Definition, Event, Instruction};
use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// One kept campaign.
struct Kept {
    campaign: Campaign,
    file: File,
}

/// Every campaign of one data directory.
pub struct Campaigns {
    dir: PathBuf,
    kept: Mutex<HashMap<String, Result<Kept, String>>>,
}

fn io(what: &str, path: &Path, e: std::io::Error) -> String {
    format!("{what} {}: {e}", path.display())
}

impl Campaigns {
    /// Opens `<data_dir>/campaigns` (created if missing) and reads every campaign.
    ///
    /// Errors: the directory cannot be created or read, or a torn line cannot be cut.
    pub fn open(data_dir: &Path) -> Result<Campaigns, String> {
        let dir = data_dir.join("campaigns");
        std::fs::create_dir_all(&dir).map_err(|e| io("cannot create", &dir, e))?;
        let mut kept = HashMap::new();
        for ent in std::fs::read_dir(&dir).map_err(|e| io("cannot read", &dir, e))? {
            let path = ent.map_err(|e| io("cannot read", &dir, e))?.path();
            let Some(name) = path
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_suffix(".campaign"))
            else {
                continue;
            };
            kept.insert(name.to_string(), recover(&path));
        }
        tracing::info!(campaigns = kept.len(), "campaigns opened");
        Ok(Campaigns {
            dir,
            kept: Mutex::new(kept),
        })
    }

    /// Creates campaign `d.name`, durably.
    ///
    /// Errors: a bad name, a name taken, or the file cannot be written.
    pub fn create(&self, mut d: Definition) -> Result<(), String> {
        plugpull::campaign::check_name(&d.name)?;
        // The listener's clock orders campaigns (the newest naming a host wins).
        d.created_unix_ms = crate::store::now_ms();
        let mut kept = self.kept.lock().unwrap();
        // One campaign at a time per machine: a second one would start its runs over
        // the first one's, before their cut was verified.
        for k in kept.values().filter_map(|k| k.as_ref().ok()) {
            let c = &k.campaign;
            if c.done() {
                continue;
            }
            if let Some(h) = d
                .hosts
                .iter()
                .find(|h| c.definition.hosts.iter().any(|o| o.host == h.host))
            {
                return Err(format!(
                    "host {} is in campaign {:?}, which is not done ({} of its {} cuts judged): let it finish, or `plugpull campaign cancel --name {}`",
                    h.host,
                    c.definition.name,
                    c.host(&h.host).cuts.len(),
                    c.definition.cuts,
                    c.definition.name
                ));
            }
        }
        if kept.contains_key(&d.name) {
            return Err(format!(
                "campaign {:?} exists already: pick another --name, or `campaign run` it",
                d.name
            ));
        }
        // Written whole under a temporary name, then renamed: a crash leaves either
        // no campaign or a whole definition, never an empty file that blocks the name.
        let path = self.dir.join(format!("{}.campaign", d.name));
        let tmp = self.dir.join(format!(".{}.campaign.new", d.name));
        std::fs::write(&tmp, record::line(&d))
            .and_then(|_| File::open(&tmp)?.sync_all())
            .and_then(|_| std::fs::rename(&tmp, &path))
            .and_then(|_| File::open(&self.dir)?.sync_all())
            .map_err(|e| io("cannot write", &path, e))?;
        let file = OpenOptions::new()
            .append(true)
            .open(&path)
            .map_err(|e| io("cannot open", &path, e))?;
        tracing::info!(campaign = %d.name, hosts = d.hosts.len(), cuts = d.cuts, "campaign created");
        let campaign = Campaign {
            definition: d,
            events: Vec::new(),
        };
        kept.insert(
            campaign.definition.name.clone(),
            Ok(Kept { campaign, file }),
        );
        Ok(())
    }

    /// A copy of campaign `name`.
    ///
    /// Errors: no such campaign, or its file is damaged.
    pub fn load(&self, name: &str) -> Result<Campaign, String> {
        let kept = self.kept.lock().unwrap();
        Ok(get(&kept, name)?.campaign.clone())
    }

    /// The campaign whose run sets hold `run` (its `Started` events), if any.
    pub fn campaign_of(&self, run: plugpull::RunId) -> Option<String> {
        let kept = self.kept.lock().unwrap();
        kept.iter().find_map(|(name, k)| {
            let k = k.as_ref().ok()?;
            k.campaign
                .events
                .iter()
                .any(|e| matches!(e, Event::Started { runs, .. } if runs.contains(&run)))
                .then(|| name.clone())
        })
    }

    /// Appends `event` to campaign `name`, durably; its 0-based position.
    ///
    /// Errors: no such campaign, a damaged one, or the append failed (the campaign
    /// then refuses further appends until the listener restarts and re-reads it).
    pub fn append(&self, name: &str, event: Event) -> Result<u64, String> {
        let mut kept = self.kept.lock().unwrap();
        append_locked(&mut kept, &self.dir, name, event)
    }

    /// What `host`'s agent does next, from the campaign where the host has a run set
    /// to verify, else the newest naming the host that still wants cuts of it (or,
    /// when none does, the newest naming it); records a
    /// [`Event::Booted`] first when `boot_id` is new for the host there. `None` when
    /// no campaign names the host.
    ///
    /// Errors: the `Booted` append failed.
    pub fn next(
        &self,
        host: &str,
        boot_id: &str,
        now_ms: u64,
    ) -> Result<Option<Instruction>, String> {
        let mut kept = self.kept.lock().unwrap();
        let mut naming: Vec<&Kept> = kept
            .values()
            .filter_map(|k| k.as_ref().ok())
            .filter(|k| k.campaign.definition.hosts.iter().any(|h| h.host == host))
            .collect();
        naming.sort_by_key(|k| k.campaign.definition.created_unix_ms);
        let open = |k: &&&Kept| k.campaign.host(host).open_run_set().is_some();
        let wants = |k: &&&Kept| !matches!(k.campaign.next_for(host), Instruction::Wait { .. });
        let chosen = naming.iter().rev().find(open);
        let Some(chosen) = chosen.or(naming.iter().rev().find(wants)).or(naming.last()) else {
            return Ok(None);
        };
        let name = chosen.campaign.definition.name.clone();
        let new_boot = chosen.campaign.host(host).boot_id() != Some(boot_id);
        if new_boot {
            let booted = Event::Booted {
                host: host.to_string(),
                boot_id: boot_id.to_string(),
                at_ms: now_ms,
            };
            append_locked(&mut kept, &self.dir, &name, booted)?;
        }
        Ok(Some(get(&kept, &name)?.campaign.next_for(host)))
    }
}

fn get<'a>(
    kept: &'a HashMap<String, Result<Kept, String>>,
    name: &str,
) -> Result<&'a Kept, String> {
    match kept.get(name) {
        None => Err(format!(
            "no campaign {name:?} in this listener's data directory"
        )),
        Some(Err(why)) => Err(format!("campaign {name:?} cannot be served: {why}")),
        Some(Ok(k)) => Ok(k),
    }
}

fn append_locked(
    kept: &mut HashMap<String, Result<Kept, String>>,
    dir: &Path,
    name: &str,
    event: Event,
) -> Result<u64, String> {
    get(kept, name)?.campaign.check_append(&event)?;
    let Some(Ok(k)) = kept.get_mut(name) else {
        unreachable!("checked by get")
    };
    let path = dir.join(format!("{name}.campaign"));
    if let Err(e) = k
        .file
        .write_all(record::line(&event).as_bytes())
        .and_then(|_| k.file.sync_data())
    {
        let why = io("cannot append to", &path, e);
        tracing::error!(campaign = name, error = %why, "campaign append failed");
        kept.insert(name.to_string(), Err(why.clone()));
        return Err(why);
    }
    k.campaign.events.push(event);
    Ok(k.campaign.events.len() as u64 - 1)
}

/// Reads one campaign file, cutting a torn last line off.
fn recover(path: &Path) -> Result<Kept, String> {
    let bytes = std::fs::read(path).map_err(|e| io("cannot read", path, e))?;
    let s = record::scan(&bytes)?;
    if let Some(why) = &s.torn {
        let torn = path.with_extension(format!("campaign.torn-{}", s.valid_len));
        std::fs::write(&torn, &bytes[s.valid_len..]).map_err(|e| io("cannot write", &torn, e))?;
        let f = OpenOptions::new()
            .write(true)
            .open(path)
            .map_err(|e| io("cannot open", path, e))?;
        f.set_len(s.valid_len as u64)
            .and_then(|_| f.sync_all())
            .map_err(|e| io("cannot cut the torn line of", path, e))?;
        tracing::warn!(path = %path.display(), %why, kept = %torn.display(), "campaign file: torn last line cut off");
    }
    let file = OpenOptions::new()
        .append(true)
        .open(path)
        .map_err(|e| io("cannot open", path, e))?;
    Ok(Kept {
        campaign: Campaign {
            definition: s.definition,
            events: s.events,
        },
        file,
    })
}
