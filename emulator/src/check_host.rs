//! `rdmacam check-host`: a conformance run for a host under test. Each scenario starts a fresh
//! camera (the user's options, changed as the scenario says), runs the host's command once
//! against it, and judges what happened: the host's exit status, the camera's counters, and the
//! rules the host broke (`host_violations`, docs/orsp-spec.md section 8).

use std::process::{Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use rdmacam_protocol::device::faults::FaultKind;

use crate::fault::FaultSpec;
use crate::run::summary::CameraSummary;
use crate::run::{RunOptions, run};

/// One scenario: what it changes in the camera and what it asks of the host.
#[derive(Debug, Clone, Copy)]
pub struct Scenario {
    /// Its name (`--only`, the table, `RDMACAM_SCENARIO`).
    pub name: &'static str,
    /// What a host meets, in words.
    pub what: &'static str,
    /// `--fault` specs for the camera.
    faults: &'static [&'static str],
    /// Packets the camera loses of what it sends (`--loss`).
    loss: f64,
    /// The camera's image size, when the scenario sets it.
    size: Option<(u32, u32)>,
    /// The camera's link, when the scenario slows it.
    link_mbps: Option<u32>,
    /// The camera goes away mid-stream: the host may end with an error, as long as it ends.
    camera_goes: bool,
    /// The camera powers up with chunk data on.
    chunks: bool,
}

const fn scenario(name: &'static str, what: &'static str) -> Scenario {
    Scenario {
        name,
        what,
        faults: &[],
        loss: 0.0,
        size: None,
        link_mbps: None,
        camera_goes: false,
        chunks: false,
    }
}

/// Every scenario, in the order they run.
pub const SCENARIOS: [Scenario; 10] = [
    scenario("clean", "a clean stream at the given options"),
    Scenario {
        loss: 0.02,
        ..scenario(
            "loss",
            "2 % of the camera's packets lost (the RC transport resends them)",
        )
    },
    Scenario {
        faults: &["reorder:p=0.02", "duplicate:p=0.02"],
        ..scenario(
            "reorder",
            "2 % of the camera's packets reordered, 2 % duplicated",
        )
    },
    Scenario {
        faults: &["corrupt:p=0.01"],
        ..scenario(
            "bad-icrc",
            "1 % of the camera's packets with a bad ICRC: the host must drop them unACKed",
        )
    },
    Scenario {
        faults: &["stall:at=500ms,for=1500ms"],
        ..scenario(
            "stall",
            "the stream stops for 1.5 s, 0.5 s after the camera starts",
        )
    },
    Scenario {
        faults: &["drop-frame:every=5"],
        ..scenario(
            "drop-frame",
            "every 5th frame dropped by the camera (a block-id gap)",
        )
    },
    Scenario {
        size: Some((638, 481)),
        ..scenario(
            "odd-size",
            "638x481 frames: no multiple of the path MTU or of 4 lines",
        )
    },
    Scenario {
        chunks: true,
        ..scenario(
            "chunks",
            "the camera left with chunk data on: each frame's chunks follow its image (PayloadSize counts them)",
        )
    },
    Scenario {
        link_mbps: Some(200),
        ..scenario("slow-link", "the camera paced to a 200 Mbit/s link")
    },
    Scenario {
        faults: &["reboot:at=800ms,for=1s"],
        camera_goes: true,
        ..scenario(
            "disconnect",
            "the camera reboots mid-stream (gone 1 s, settings lost): the host must end or \
             reconnect, not hang",
        )
    },
];

/// How a check runs.
#[derive(Debug, Clone)]
pub struct CheckOptions {
    /// The camera's options (each scenario changes some).
    pub camera: RunOptions,
    /// Frames the host is asked for (`{frames}`, `RDMACAM_FRAMES`).
    pub frames: u64,
    /// The longest a host command may run in one scenario before it is killed.
    pub timeout: Duration,
    /// Only these scenarios (all when empty).
    pub only: Vec<String>,
    /// The host's command and its arguments (placeholders replaced).
    pub command: Vec<String>,
}

/// What one scenario came to.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Outcome {
    /// The scenario's name.
    pub scenario: String,
    /// Whether the host passed.
    pub pass: bool,
    /// Why it failed (empty when it passed), each reason naming what went wrong.
    pub why: Vec<String>,
    /// The host command's exit status (`None`: killed, or ended by a signal).
    pub host_exit: Option<i32>,
    /// Seconds the host command ran.
    pub seconds: f64,
    /// The camera's summary, its `host_violations` included.
    pub camera: CameraSummary,
}

impl CheckOptions {
    /// The scenarios `only` selects; an unknown name is refused with the list.
    pub fn scenarios(&self) -> Result<Vec<Scenario>> {
        for n in &self.only {
            if !SCENARIOS.iter().any(|s| s.name == n) {
                let names: Vec<&str> = SCENARIOS.iter().map(|s| s.name).collect();
                bail!("no scenario {n:?}: one of {}", names.join(", "));
            }
        }
        Ok(SCENARIOS
            .iter()
            .filter(|s| self.only.is_empty() || self.only.iter().any(|n| n == s.name))
            .copied()
            .collect())
    }

    /// The camera of scenario `s`.
    fn camera_for(&self, s: &Scenario) -> Result<RunOptions> {
        let mut o = self.camera.clone();
        o.loss = s.loss;
        for f in s.faults {
            o.faults.push(f.parse::<FaultSpec>()?);
        }
        if let Some((w, h)) = s.size {
            o.device.width = w;
            o.device.height = h;
            o.device.sensor_width = o.device.sensor_width.max(w);
            o.device.sensor_height = o.device.sensor_height.max(h);
        }
        o.device.chunk_mode |= s.chunks;
        if let Some(m) = s.link_mbps {
            o.device.link_speed_mbps = m;
        }
        crate::fault::check_faults(&o.faults, 1)?;
        Ok(o)
    }

    /// The host's command for scenario `s`: placeholders replaced, the camera's facts in the
    /// environment.
    fn command_for(&self, s: &Scenario) -> Command {
        let c = &self.camera;
        let vars = [
            ("camera", c.device.ip.to_string()),
            ("gvcp_port", c.gvcp_port.to_string()),
            ("roce_port", c.roce_port.to_string()),
            ("host_roce_port", c.host_roce_port.to_string()),
            ("frames", self.frames.to_string()),
            ("scenario", s.name.to_string()),
        ];
        let fill = |arg: &str| {
            vars.iter().fold(arg.to_string(), |a, (k, v)| {
                a.replace(&format!("{{{k}}}"), v)
            })
        };
        let mut cmd = Command::new(fill(&self.command[0]));
        cmd.args(self.command[1..].iter().map(|a| fill(a)));
        for (k, v) in &vars {
            cmd.env(format!("RDMACAM_{}", k.to_uppercase()), v);
        }
        // the host's output goes to stderr: stdout holds the table (or the JSON) alone
        cmd.stdin(Stdio::null());
        if let Ok(fd) = std::os::fd::AsFd::as_fd(&std::io::stderr()).try_clone_to_owned() {
            cmd.stdout(Stdio::from(fd));
        }
        cmd
    }

    /// Run scenario `s`: a fresh camera, the host once against it, the verdict.
    pub fn run_one(&self, s: &Scenario) -> Result<Outcome> {
        let opts = self.camera_for(s)?;
        let stop = Arc::new(AtomicBool::new(false));
        let camera = {
            let stop = stop.clone();
            std::thread::Builder::new()
                .name(format!("camera {}", s.name))
                .spawn(move || run(opts, stop))
                .context("cannot start the camera thread")?
        };
        // the camera's sockets first (a port in use surfaces here, not as a host failure)
        std::thread::sleep(Duration::from_millis(200));
        if camera.is_finished() {
            return match camera.join() {
                Ok(Err(e)) => {
                    Err(e.context(format!("the camera of scenario {} did not start", s.name)))
                }
                _ => Err(anyhow::anyhow!(
                    "the camera of scenario {} stopped at once",
                    s.name
                )),
            };
        }
        eprintln!("rdmacam check-host: scenario {}: {}", s.name, s.what);
        let started = Instant::now();
        let host = self.command_for(s).spawn();
        let (status, killed) = match host {
            Ok(child) => wait_for(child, self.timeout),
            Err(e) => {
                stop.store(true, Ordering::SeqCst);
                let _ = camera.join();
                bail!("cannot run the host command {:?}: {e}", self.command[0]);
            }
        };
        let seconds = started.elapsed().as_secs_f64();
        // what the host sent last (a DISCONNECT, a release of control) reaches the camera
        std::thread::sleep(Duration::from_millis(100));
        stop.store(true, Ordering::SeqCst);
        let cam = match camera.join() {
            Ok(r) => r.with_context(|| format!("the camera of scenario {} failed", s.name))?,
            Err(_) => bail!("the camera of scenario {} panicked", s.name),
        };
        let why = self.verdict(s, status, killed, &cam);
        Ok(Outcome {
            scenario: s.name.to_string(),
            pass: why.is_empty(),
            why,
            host_exit: status.and_then(|st| st.code()),
            seconds,
            camera: cam,
        })
    }

    /// What the host did wrong in scenario `s`, each reason in words; empty when it passed.
    fn verdict(
        &self,
        s: &Scenario,
        status: Option<ExitStatus>,
        killed: bool,
        cam: &CameraSummary,
    ) -> Vec<String> {
        let mut why = Vec::new();
        if killed {
            why.push(format!(
                "the host was still running after {} s and was killed (a host must end or go on \
                 streaming, not hang; --timeout)",
                self.timeout.as_secs()
            ));
        } else if let Some(st) = status
            && !st.success()
            && !s.camera_goes
        {
            why.push(format!("the host exited with {st}"));
        }
        for v in &cam.host_violations {
            why.push(format!(
                "the host broke a rule, {} x{}: first {} [{}]",
                v.kind, v.count, v.first, v.spec
            ));
        }
        if s.camera_goes {
            return why;
        }
        if cam.orsp_connections == 0 {
            why.push("the host never made an ORSP connection".into());
            return why;
        }
        let faulted = cam.faults.0[FaultKind::FrameDrop as usize];
        let starved = cam.orsp_frames_dropped.saturating_sub(faulted);
        if starved > 0 {
            why.push(format!(
                "the camera dropped {starved} frame{} for want of a buffer: the host did not \
                 queue buffers back in time (orsp-spec 7)",
                if starved == 1 { "" } else { "s" }
            ));
        }
        let due = self.frames.saturating_sub(faulted);
        if cam.orsp_frames < due && why.is_empty() {
            why.push(format!(
                "the camera sent {} of the {due} frames the host was asked to take",
                cam.orsp_frames
            ));
        }
        why
    }
}

/// Wait for `child` at most `limit`; kill it then. (status, killed)
fn wait_for(mut child: std::process::Child, limit: Duration) -> (Option<ExitStatus>, bool) {
    let until = Instant::now() + limit;
    loop {
        match child.try_wait() {
            Ok(Some(st)) => return (Some(st), false),
            Ok(None) if Instant::now() < until => std::thread::sleep(Duration::from_millis(20)),
            _ => {
                let _ = child.kill();
                return (child.wait().ok(), true);
            }
        }
    }
}

/// The table `check-host` prints: scenario, pass or FAIL, why.
pub fn table(outcomes: &[Outcome]) -> String {
    let mut t = format!("{:<12} {:<6} why\n", "scenario", "result");
    for o in outcomes {
        let result = if o.pass { "pass" } else { "FAIL" };
        let first = if o.pass {
            format!(
                "{} frames in {:.1} s, host exit {}",
                o.camera.orsp_frames,
                o.seconds,
                o.host_exit.map_or("-".into(), |c| c.to_string())
            )
        } else {
            o.why[0].clone()
        };
        t.push_str(&format!("{:<12} {result:<6} {first}\n", o.scenario));
        for w in o.why.iter().skip(1) {
            t.push_str(&format!("{:<12} {:<6} {w}\n", "", ""));
        }
    }
    let failed = outcomes.iter().filter(|o| !o.pass).count();
    t.push_str(&format!(
        "{} of {} scenarios passed\n",
        outcomes.len() - failed,
        outcomes.len()
    ));
    t
}
