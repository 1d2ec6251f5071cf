//! `keel diskcheck` end to end through the real binary on a real file:
//! listen, write, verify; then damage the file by hand, following only the
//! block layout of `docs/diskcheck.md`, and check what verify reports.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

const BLOCK: usize = 4096;
const SECTOR: usize = 512;

fn keel() -> Command {
    Command::new(env!("CARGO_BIN_EXE_keel"))
}

/// The server, killed when dropped.
struct Listener {
    child: Child,
    addr: String,
}

impl Listener {
    fn start(state: &Path) -> Listener {
        let mut child = keel()
            .args(["diskcheck", "listen", "--port", "0", "--state"])
            .arg(state)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stderr = BufReader::new(child.stderr.take().unwrap());
        let mut line = String::new();
        stderr.read_line(&mut line).unwrap();
        // Keep draining: the server logs each run on stderr.
        std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::sink()));
        // "listening on 127.0.0.1:PORT, records in …"
        let addr = line
            .strip_prefix("listening on ")
            .and_then(|r| r.split(',').next())
            .unwrap_or_else(|| panic!("unexpected first line: {line}"))
            .to_string();
        Listener { child, addr }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn run(cmd: &mut Command) -> Output {
    cmd.output().unwrap()
}

fn verify_json(addr: &str, file: &Path) -> (bool, serde_json::Value) {
    let out = run(keel()
        .args(["diskcheck", "verify", "--json", "--server", addr, "--file"])
        .arg(file));
    let stdout = String::from_utf8(out.stdout).unwrap();
    let json = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("{e}: {stdout} {}", String::from_utf8_lossy(&out.stderr)));
    (out.status.success(), json)
}

fn le64(b: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(b[off..off + 8].try_into().unwrap())
}

/// A block as `docs/diskcheck.md` specifies it, with zero filler.
fn spec_block(run_id: u64, index: u64, generation: u64, time_us: u64) -> Vec<u8> {
    let mut b = vec![0u8; BLOCK];
    b[0..8].copy_from_slice(b"KEELDCHK");
    b[8..12].copy_from_slice(&1u32.to_le_bytes());
    b[12..16].copy_from_slice(&(BLOCK as u32).to_le_bytes());
    b[16..24].copy_from_slice(&run_id.to_le_bytes());
    b[24..32].copy_from_slice(&index.to_le_bytes());
    b[32..40].copy_from_slice(&generation.to_le_bytes());
    b[48..56].copy_from_slice(&time_us.to_le_bytes());
    for (no, s) in b.chunks_exact_mut(SECTOR).enumerate() {
        s[480..488].copy_from_slice(&run_id.to_le_bytes());
        s[488..496].copy_from_slice(&index.to_le_bytes());
        s[496..504].copy_from_slice(&generation.to_le_bytes());
        s[504..508].copy_from_slice(&(no as u32).to_le_bytes());
        let crc = crc32c::crc32c(&s[..508]);
        s[508..512].copy_from_slice(&crc.to_le_bytes());
    }
    let crc = crc32c::crc32c(&b);
    b[44..48].copy_from_slice(&crc.to_le_bytes());
    b
}

fn tmp() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("keel-dccli-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn write_verify_then_lost_and_torn_blocks() {
    let dir = tmp();
    let file = dir.join("disk.bin");
    let server = Listener::start(&dir.join("state"));

    // Unreachable server: a clear error and no file.
    let out = run(keel()
        .args([
            "diskcheck",
            "write",
            "--server",
            "127.0.0.1:1",
            "--size",
            "1M",
            "--file",
        ])
        .arg(&file));
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot reach"), "{err}");
    assert!(!file.exists());
    // A size that is not a whole number of blocks.
    let out = run(keel()
        .args([
            "diskcheck",
            "write",
            "--server",
            &server.addr,
            "--size",
            "10000",
            "--file",
        ])
        .arg(&file));
    assert!(!out.status.success());

    let out = run(keel()
        .args(["diskcheck", "write", "--json", "--server", &server.addr])
        .args([
            "--size",
            "1M",
            "--block",
            "4K",
            "--threads",
            "2",
            "--writes",
            "600",
        ])
        .args(["--method", "fdatasync", "--file"])
        .arg(&file));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["writes"], 600);

    let (ok, r) = verify_json(&server.addr, &file);
    assert!(ok, "{r}");
    assert_eq!(r["errors"], 0);
    assert_eq!(r["in_flight"], 0);
    assert!(
        r["acked"].as_u64().unwrap() > 0 && r["fine"] == r["acked"],
        "{r}"
    );

    // Put an acknowledged block back to its previous generation.
    let mut bytes = std::fs::read(&file).unwrap();
    let pos = (0..bytes.len() / BLOCK)
        .find(|p| le64(&bytes, p * BLOCK + 32) >= 2)
        .expect("a block written twice");
    let b = &bytes[pos * BLOCK..(pos + 1) * BLOCK];
    let (run_id, generation, time) = (le64(b, 16), le64(b, 32), le64(b, 48));
    assert_eq!(
        spec_block(run_id, pos as u64, generation, time)[..56],
        b[..56],
        "header per the spec"
    );
    let older = spec_block(run_id, pos as u64, generation - 1, time);
    bytes[pos * BLOCK..(pos + 1) * BLOCK].copy_from_slice(&older);
    std::fs::write(&file, &bytes).unwrap();
    let (ok, r) = verify_json(&server.addr, &file);
    assert!(!ok, "verify must fail when an acknowledged write is lost");
    assert_eq!(
        (r["lost"].as_u64(), r["torn"].as_u64()),
        (Some(1), Some(0)),
        "{r}"
    );
    assert_eq!(r["error_blocks"][0]["block"], pos);

    // Corrupt one byte of another acknowledged block.
    let other = (0..bytes.len() / BLOCK)
        .find(|p| *p != pos && le64(&bytes, p * BLOCK + 32) >= 1)
        .unwrap();
    bytes[other * BLOCK + 1000] ^= 0xff;
    std::fs::write(&file, &bytes).unwrap();
    let (ok, r) = verify_json(&server.addr, &file);
    assert!(!ok);
    assert_eq!(
        (r["lost"].as_u64(), r["torn"].as_u64()),
        (Some(1), Some(1)),
        "{r}"
    );

    // The wrong file.
    std::fs::write(dir.join("other.bin"), vec![0u8; 65536]).unwrap();
    let out = run(keel()
        .args(["diskcheck", "verify", "--server", &server.addr, "--file"])
        .arg(dir.join("other.bin")));
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no diskcheck block"));
    drop(server);
    std::fs::remove_dir_all(&dir).unwrap();
}

fn verify_ack_file(acks: &Path, file: &Path, json: bool) -> Output {
    let mut cmd = keel();
    cmd.args(["diskcheck", "verify", "--ack-file"]).arg(acks);
    if json {
        cmd.arg("--json");
    }
    run(cmd.arg("--file").arg(file))
}

fn json_keys(v: &serde_json::Value) -> Vec<String> {
    let mut keys: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
    keys.sort();
    keys
}

/// A disk that kept none of the acknowledged writes (every block zeros, or
/// the file cut to nothing) gets the ordinary verdict: acked N, lost N, the
/// same JSON fields as any run and the exit status of a run with lost
/// writes. A file the ack file's run never wrote is still the wrong file.
#[test]
fn every_acknowledged_write_lost_is_a_verdict_not_wrong_file() {
    let dir = std::env::temp_dir().join(format!("keel-dccli-lost-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (file, acks) = (dir.join("disk.bin"), dir.join("acks.log"));
    let out = run(keel()
        .args(["diskcheck", "write", "--ack-file"])
        .arg(&acks)
        .args(["--size", "256K", "--block", "4K", "--writes", "200"])
        .args(["--method", "fdatasync", "--file"])
        .arg(&file));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = verify_ack_file(&acks, &file, true);
    assert!(out.status.success());
    let clean: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let acked = clean["acked"].as_u64().unwrap();
    assert!(acked > 0 && clean["fine"] == acked, "{clean}");

    let len = std::fs::metadata(&file).unwrap().len() as usize;
    for (what, content) in [("zeroed", vec![0u8; len]), ("emptied", Vec::new())] {
        std::fs::write(&file, &content).unwrap();
        let out = verify_ack_file(&acks, &file, true);
        assert_eq!(out.status.code(), Some(1), "{what}");
        let r: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{what}: {e}: {}", String::from_utf8_lossy(&out.stderr)));
        assert_eq!(json_keys(&r), json_keys(&clean), "{what}");
        assert_eq!(r["run_id"], clean["run_id"], "{what}");
        assert_eq!(
            (r["acked"].as_u64(), r["lost"].as_u64(), r["fine"].as_u64()),
            (Some(acked), Some(acked), Some(0)),
            "{what}: {r}"
        );
        assert_eq!(r["errors"], acked, "{what}");
        let out = verify_ack_file(&acks, &file, false);
        assert_eq!(out.status.code(), Some(1), "{what}");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains("the disk kept none of its acknowledged writes"),
            "{what}: {text}"
        );
    }

    let other = dir.join("other.bin");
    std::fs::write(&other, vec![0u8; len]).unwrap();
    let out = verify_ack_file(&acks, &other, false);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no diskcheck block") && err.contains("wrong file"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A mounted tmpfs to put an ack file on: /dev/shm where it is one, else
/// one mounted for the test where that is permitted (root), else none.
struct Tmpfs {
    dir: PathBuf,
    mounted: bool,
}

impl Tmpfs {
    fn find(scratch: &Path) -> Option<Tmpfs> {
        let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
        let shm = mounts.lines().any(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            f.get(1) == Some(&"/dev/shm") && f.get(2) == Some(&"tmpfs")
        });
        if shm {
            return Some(Tmpfs {
                dir: PathBuf::from("/dev/shm"),
                mounted: false,
            });
        }
        let dir = scratch.join("tmpfs");
        std::fs::create_dir_all(&dir).unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=4M", "tmpfs"])
            .arg(&dir)
            .status()
            .is_ok_and(|s| s.success());
        ok.then_some(Tmpfs { dir, mounted: true })
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        if self.mounted {
            let _ = Command::new("umount").arg(&self.dir).status();
        }
    }
}

fn write_ack_file(file: &Path, acks: &Path) -> Output {
    run(keel()
        .args(["diskcheck", "write", "--json", "--ack-file"])
        .arg(acks)
        .args(["--size", "64K", "--block", "4K", "--writes", "20"])
        .args(["--method", "fdatasync", "--file"])
        .arg(file))
}

fn warnings(out: &Output) -> (Vec<String>, String) {
    assert!(out.status.success(), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let w = v["warnings"]
        .as_array()
        .unwrap_or_else(|| panic!("no warnings field: {v}"))
        .iter()
        .map(|w| w.as_str().unwrap().to_string())
        .collect();
    (w, String::from_utf8_lossy(&out.stderr).into_owned())
}

/// An ack file in memory or on the file system under test makes the check
/// prove nothing: `write` warns on stderr and in its JSON `warnings`, and
/// `verify` does too.
#[test]
fn an_ack_file_that_cannot_outlive_the_power_cut_is_warned_about() {
    let dir = std::env::temp_dir().join(format!("keel-dccli-place-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();

    // Beside the file under test: the same file system.
    let (file, acks) = (dir.join("disk.bin"), dir.join("acks.log"));
    let (w, stderr) = warnings(&write_ack_file(&file, &acks));
    assert!(w.len() == 1 && w[0].contains("same file system"), "{w:?}");
    assert!(stderr.contains(&format!("warning: {}", w[0])), "{stderr}");
    let out = verify_ack_file(&acks, &file, true);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        report["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w.as_str().unwrap().contains("same file system")),
        "{report}"
    );

    // In memory.
    match Tmpfs::find(&dir) {
        Some(tmpfs) => {
            let acks = tmpfs
                .dir
                .join(format!("keel-dccli-acks-{}.log", std::process::id()));
            let file = dir.join("disk2.bin");
            let out = write_ack_file(&file, &acks);
            let _ = std::fs::remove_file(&acks);
            let (w, stderr) = warnings(&out);
            assert!(w.iter().any(|w| w.contains("is on tmpfs")), "{w:?}");
            assert!(
                !w.iter().any(|w| w.contains("same file system")),
                "the disk and the tmpfs differ: {w:?}"
            );
            assert!(stderr.contains("lives in memory"), "{stderr}");
        }
        None => eprintln!("no tmpfs at /dev/shm and none could be mounted: tmpfs case not run"),
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
