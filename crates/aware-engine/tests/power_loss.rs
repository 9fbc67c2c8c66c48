//! Power-loss model (decision D1; 01 §3, §8): a sequence once answered at `Durability::Full` is
//! never reissued after an OS crash or power loss.
//!
//! Two models of "what is on the disk when the power goes", both taken at SQLite's own file
//! boundary (`state.db` and `state.db-wal`; the `-shm` index is rebuilt from the WAL on open):
//!
//! 1. **Bytes at the answer.** After every answered append the two files are copied as they are
//!    at that moment. At `full` the WAL frames of a committed transaction were fsynced before
//!    `COMMIT` returned, so these bytes are what survives. (At `normal` the same copy is what a
//!    process crash leaves: the page cache survives it.)
//! 2. **Bytes at the last fsync.** A pass-through SQLite VFS, registered as the process default
//!    (so the engine's own connections use it), keeps for each file an image of its contents as
//!    of its last successful `xSync`. A crash image is made of those images only: every write
//!    that was not followed by an fsync is lost, the harshest thing power loss may do to a
//!    page cache. This checks the claim of model 1 instead of assuming it, and it shows the
//!    contrast: at `Durability::Normal` commits are not fsynced, and the crash image reissues
//!    sequences that had been answered (01 §8 allows exactly that).
//!
//! 3. **Some unsynced pages, the last one torn.** A page cache may also have written back part
//!    of what was never fsynced. From the bytes at the last fsync, each 4 KiB block that the
//!    page cache holds differently survives with a seeded probability (1/2, 4/5 or 19/20 per
//!    image), and in half the images the last surviving block is torn: only a random number of
//!    its 512-byte sectors made it. At `full`
//!    such images are taken just before each commit's WAL fsync (the commit is in flight, not
//!    answered): every answered sequence survives and none is reissued. At `normal` they are
//!    taken after ten unsynced commits: what survives is a prefix of the answered appends, the
//!    store opens and the cursor invariant holds.
//!
//! Not modelled: reordering of writes *within* one fsynced range, a device that acknowledges an
//! fsync it did not perform, bit rot, and damage to blocks that were already fsynced.
//!
//! Each crash image is opened by a new `Engine` (which runs WAL recovery and the restart sweep)
//! and checked: the answered sequence is present, the head and the watcher's cursor include it,
//! and the next append gets a larger sequence.
// Test code: a panic is the failure report (the workspace denies unwrap/expect elsewhere).
#![allow(clippy::unwrap_used, clippy::expect_used)]
// `unsafe` only in the SQLite VFS shim below, with its proof in the SAFETY block.
#![allow(unsafe_code)]

use aware_core::{AgentId, SessionKey, SessionRef};
use aware_engine::{CreateSession, Engine, EngineConfig, ManualClock, NewTurn};
use aware_testkit::engine::{open_sqlite_engine, Durability};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Once, OnceLock};

const PARENT: &str = "agent:main:main";
const CHILD: &str = "agent:main:subagent:child";
use aware_testkit::spec::T0;
const APPENDS: usize = 50;
const FILES: [&str; 2] = ["state.db", "state.db-wal"];

fn sref(k: &str) -> SessionRef {
    SessionRef::with_default(
        SessionKey::parse(k).unwrap(),
        &AgentId::parse("main").unwrap(),
    )
}

fn open(db: &Path, durability: Durability) -> Engine {
    let mut c = EngineConfig::new();
    c.notify_on_create = false;
    c.retention.prune_interval_secs = 31_536_000;
    let e = open_sqlite_engine(db, durability, c, Arc::new(ManualClock::new(T0))).unwrap();
    e.start().unwrap();
    e
}

/// Creates the parent and its child; the parent's cursor on the child is seeded.
fn create_pair(e: &Engine) {
    e.create_session(CreateSession::new(SessionKey::parse(PARENT).unwrap()))
        .unwrap();
    e.create_session(
        CreateSession::new(SessionKey::parse(CHILD).unwrap())
            .parent(SessionKey::parse(PARENT).unwrap()),
    )
    .unwrap();
}

fn append(e: &Engine, i: usize) -> i64 {
    e.post_turn(&sref(CHILD), NewTurn::user(format!("turn {i}")))
        .unwrap()
        .event
        .expect("a human turn on a parented child records")
        .sequence
}

fn all_sequences(e: &Engine, s: &SessionRef) -> Vec<i64> {
    let mut out = Vec::new();
    let mut after = 0;
    loop {
        let page = e.list_since(s, after, 200).unwrap();
        out.extend(page.events.iter().map(|ev| ev.sequence));
        if !page.truncated {
            return out;
        }
        after = *out.last().unwrap();
    }
}

/// What a crash image holds, read by a fresh engine; then one more append on it.
struct Recovered {
    sequences: Vec<i64>,
    head: i64,
    /// `(last_seen, notified, material)` of the parent's cursor on the child.
    cursor: (i64, i64, i64),
    next: i64,
}

fn recover(dir: &Path, durability: Durability) -> Recovered {
    let e = open(&dir.join("state.db"), durability);
    let c = sref(CHILD);
    let sequences = all_sequences(&e, &c);
    assert!(
        sequences.windows(2).all(|p| p[0] < p[1]),
        "stream strictly increasing: {sequences:?}"
    );
    let head = e.version(&c);
    let watches = e.watches(&sref(PARENT)).unwrap();
    assert_eq!(
        watches.len(),
        1,
        "the parent's cursor on the child survives"
    );
    let s = watches[0].state;
    assert!(s.invariant_holds(), "cursor invariant: {s:?}");
    let next = append(&e, usize::MAX);
    e.close();
    Recovered {
        sequences,
        head,
        cursor: (s.last_seen, s.notified, s.material),
        next,
    }
}

fn copy_files(from: &Path, to: &Path) {
    for f in FILES {
        let src = from.join(f);
        if src.exists() {
            std::fs::copy(&src, to.join(f)).unwrap();
        }
    }
}

/// Model 1: the bytes of `state.db` and `state.db-wal` at the moment each append was answered.
/// On its own this is the image a *process* crash leaves (the OS page cache survives); it is
/// the power-loss image only because the fsync test below shows nothing of it was still
/// waiting for an fsync at `full`.
fn bytes_at_the_answer(durability: Durability, appends: usize) -> Vec<i64> {
    install_sync_recording_vfs();
    let dir = tempfile::tempdir().unwrap();
    let e = open(&dir.path().join("state.db"), durability);
    create_pair(&e);
    let mut answered = Vec::new();
    for i in 0..appends {
        answered.push(append(&e, i));
        let crash = tempfile::tempdir().unwrap();
        copy_files(dir.path(), crash.path());
        let r = recover(crash.path(), durability);
        check_survived(&r, &answered, i);
    }
    e.close();
    answered
}

#[test]
fn full_every_answered_sequence_survives_in_the_files_at_the_answer() {
    let answered = bytes_at_the_answer(Durability::Full, APPENDS);
    eprintln!(
        "power_loss (bytes at the answer, full): {APPENDS} crash images, sequences {}..={} all \
         present, none reissued",
        answered[0],
        answered[APPENDS - 1]
    );
}

/// `normal` survives a process crash: the committed WAL frames are in the files (page cache)
/// when the answer is given, only not fsynced.
#[test]
fn normal_every_answered_sequence_survives_a_process_crash() {
    let answered = bytes_at_the_answer(Durability::Normal, 20);
    eprintln!(
        "power_loss (bytes at the answer, normal = process crash): 20 crash images, sequences \
         {}..={} all present, none reissued",
        answered[0], answered[19]
    );
}

/// Model 2 at `full`: only what was fsynced survives, and that is every answered append.
#[test]
fn full_every_answered_sequence_was_fsynced_before_the_answer() {
    install_sync_recording_vfs();
    let dir = tempfile::tempdir().unwrap();
    let e = open(&dir.path().join("state.db"), Durability::Full);
    create_pair(&e);
    let mut answered = Vec::new();
    for i in 0..APPENDS {
        answered.push(append(&e, i));
        let crash = tempfile::tempdir().unwrap();
        write_crash_image(dir.path(), crash.path());
        let r = recover(crash.path(), Durability::Full);
        check_survived(&r, &answered, i);
    }
    e.close();
    eprintln!(
        "power_loss (bytes at the last fsync, full): {APPENDS} crash images, sequences {}..={} \
         all present, none reissued",
        answered[0],
        answered[APPENDS - 1]
    );
}

/// Model 2 at `normal`, the contrast: commits are not fsynced, so after a power loss the last
/// answered appends are gone and their sequences are issued again (01 §8: "survives process
/// crashes only"). Deterministic: nothing checkpoints between the appends (the WAL stays far
/// below the 1000-page auto-checkpoint), so nothing syncs the WAL after the setup checkpoint.
#[test]
fn normal_answered_sequences_are_lost_and_reissued_after_power_loss() {
    install_sync_recording_vfs();
    let dir = tempfile::tempdir().unwrap();
    let e = open(&dir.path().join("state.db"), Durability::Normal);
    create_pair(&e);
    // A passive checkpoint syncs the WAL and the database: the setup is durable.
    e.store().maintain().unwrap();
    let setup_head = e.version(&sref(CHILD));
    let mut answered = Vec::new();
    for i in 0..10 {
        answered.push(append(&e, i));
    }
    let crash = tempfile::tempdir().unwrap();
    write_crash_image(dir.path(), crash.path());
    let r = recover(crash.path(), Durability::Normal);
    e.close();
    assert_eq!(
        r.head,
        setup_head,
        "at normal no answered append was fsynced: the crash image is the setup ({r:?})",
        r = (r.head, &r.sequences)
    );
    assert!(
        answered.iter().all(|s| !r.sequences.contains(s)),
        "all ten answered appends are lost"
    );
    assert_eq!(
        r.next, answered[0],
        "the first lost sequence is issued again after the power loss"
    );
    eprintln!(
        "power_loss (bytes at the last fsync, normal): answered {:?} lost; the next append \
         reissued {}",
        answered, r.next
    );
}

fn check_survived(r: &Recovered, answered: &[i64], i: usize) {
    let seq = *answered.last().unwrap();
    let missing: Vec<i64> = answered
        .iter()
        .copied()
        .filter(|s| !r.sequences.contains(s))
        .collect();
    assert!(
        missing.is_empty(),
        "append {i}: answered sequences {missing:?} missing from the crash image"
    );
    assert_eq!(r.head, seq, "append {i}: the head is the answered sequence");
    assert!(
        r.cursor.2 >= seq,
        "append {i}: the watcher's material {} lost the answered {seq}",
        r.cursor.2
    );
    assert!(
        r.next > seq,
        "append {i}: sequence {} reissued after the crash (answered {seq})",
        r.next
    );
}

// ---------------------------------------------------------------------------------------------
// A pass-through VFS that remembers each file's contents at its last successful xSync.
//
// SAFETY (why the `unsafe` below is sound; test-only code):
// - Registration happens once (`Once`). The real VFS comes from `sqlite3_vfs_find` and is never
//   unregistered, so its pointer stays valid for the process. The shim's `sqlite3_vfs` struct and
//   its name are leaked on purpose: SQLite keeps pointers to both for as long as the VFS is
//   registered, i.e. forever.
// - SQLite allocates `szOsFile` bytes per open file and passes that block to `xOpen`; we declare
//   `szOsFile = real + HEADER`, so the block holds our `ShimFile` header followed by the real
//   VFS's file. `ShimFile` is `repr(C)` and made of pointer-sized fields, so `HEADER` is a
//   multiple of the pointer alignment and the real file at offset `HEADER` is aligned as SQLite
//   aligns the whole block (8 bytes).
// - `pMethods` is set only after the real `xOpen` succeeded, so SQLite calls our methods only on
//   files whose `real` half is open, and calls `xClose` exactly once (after which it never touches
//   the file). Every method forwards to the real file's own method table with the real file
//   pointer, exactly as SQLite would have called it.
// - `path` is a `Box<PathBuf>` owned by the open file: created in `xOpen`, freed once in `xClose`.
// - SQLite never calls two methods of one file at the same time (it holds the connection's
//   mutex); the shared `synced()` map is behind a `Mutex`.

use rusqlite::ffi;
use std::ffi::{c_char, c_int, c_void, CStr, CString};

/// Contents of each file (full path) as of its last fsync.
fn synced() -> &'static Mutex<HashMap<PathBuf, Vec<u8>>> {
    static SYNCED: OnceLock<Mutex<HashMap<PathBuf, Vec<u8>>>> = OnceLock::new();
    SYNCED.get_or_init(|| Mutex::new(HashMap::new()))
}

/// The VFS the shim forwards to (the default `unix` VFS).
static REAL_VFS: OnceLock<usize> = OnceLock::new();

fn real_vfs() -> *mut ffi::sqlite3_vfs {
    *REAL_VFS.get().unwrap() as *mut ffi::sqlite3_vfs
}

/// A shim file: SQLite's header, then the real VFS's file in the same allocation.
#[repr(C)]
struct ShimFile {
    base: ffi::sqlite3_file,
    path: *mut PathBuf,
    real: *mut ffi::sqlite3_file,
}

const HEADER: usize = std::mem::size_of::<ShimFile>();

/// Registers the shim as the process's default VFS, once.
fn install_sync_recording_vfs() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| unsafe {
        let real = ffi::sqlite3_vfs_find(std::ptr::null());
        assert!(!real.is_null(), "a default VFS");
        REAL_VFS.set(real as usize).unwrap();
        let mut vfs: ffi::sqlite3_vfs = std::ptr::read(real);
        let name = CString::new("aware-power-loss").unwrap();
        vfs.zName = name.into_raw();
        vfs.szOsFile = (*real).szOsFile + HEADER as c_int;
        vfs.xOpen = Some(shim_open);
        vfs.pNext = std::ptr::null_mut();
        let vfs = Box::into_raw(Box::new(vfs));
        assert_eq!(ffi::sqlite3_vfs_register(vfs, 1), ffi::SQLITE_OK);
    });
}

static SHIM_METHODS: ffi::sqlite3_io_methods = ffi::sqlite3_io_methods {
    iVersion: 2, // no xFetch/xUnfetch: every read and write goes through the methods below
    xClose: Some(shim_close),
    xRead: Some(shim_read),
    xWrite: Some(shim_write),
    xTruncate: Some(shim_truncate),
    xSync: Some(shim_sync),
    xFileSize: Some(shim_file_size),
    xLock: Some(shim_lock),
    xUnlock: Some(shim_unlock),
    xCheckReservedLock: Some(shim_check_reserved_lock),
    xFileControl: Some(shim_file_control),
    xSectorSize: Some(shim_sector_size),
    xDeviceCharacteristics: Some(shim_device_characteristics),
    xShmMap: Some(shim_shm_map),
    xShmLock: Some(shim_shm_lock),
    xShmBarrier: Some(shim_shm_barrier),
    xShmUnmap: Some(shim_shm_unmap),
    xFetch: None,
    xUnfetch: None,
};

unsafe extern "C" fn shim_open(
    _vfs: *mut ffi::sqlite3_vfs,
    name: ffi::sqlite3_filename,
    file: *mut ffi::sqlite3_file,
    flags: c_int,
    out_flags: *mut c_int,
) -> c_int {
    let shim = file as *mut ShimFile;
    let real = (file as *mut u8).add(HEADER) as *mut ffi::sqlite3_file;
    (*shim).base.pMethods = std::ptr::null();
    (*shim).path = std::ptr::null_mut();
    (*shim).real = real;
    let vfs = real_vfs();
    let rc = ((*vfs).xOpen.unwrap())(vfs, name, real, flags, out_flags);
    if rc == ffi::SQLITE_OK && !(*real).pMethods.is_null() {
        if !name.is_null() {
            let path = CStr::from_ptr(name as *const c_char)
                .to_string_lossy()
                .into_owned();
            (*shim).path = Box::into_raw(Box::new(PathBuf::from(path)));
        }
        (*shim).base.pMethods = &SHIM_METHODS;
    }
    rc
}

unsafe fn real(f: *mut ffi::sqlite3_file) -> *mut ffi::sqlite3_file {
    (*(f as *mut ShimFile)).real
}

unsafe fn methods(f: *mut ffi::sqlite3_file) -> &'static ffi::sqlite3_io_methods {
    &*(*real(f)).pMethods
}

unsafe extern "C" fn shim_close(f: *mut ffi::sqlite3_file) -> c_int {
    let rc = (methods(f).xClose.unwrap())(real(f));
    let shim = f as *mut ShimFile;
    if !(*shim).path.is_null() {
        drop(Box::from_raw((*shim).path));
        (*shim).path = std::ptr::null_mut();
    }
    rc
}

unsafe extern "C" fn shim_sync(f: *mut ffi::sqlite3_file, flags: c_int) -> c_int {
    let path = (*(f as *mut ShimFile)).path;
    if !path.is_null() {
        record_pre_sync(&*path);
    }
    let rc = (methods(f).xSync.unwrap())(real(f), flags);
    if rc == ffi::SQLITE_OK && !path.is_null() {
        // The file's bytes now are what an fsync made durable.
        if let Ok(bytes) = std::fs::read(&*path) {
            synced().lock().unwrap().insert((*path).clone(), bytes);
        }
    }
    rc
}

unsafe extern "C" fn shim_read(
    f: *mut ffi::sqlite3_file,
    buf: *mut c_void,
    amt: c_int,
    off: ffi::sqlite3_int64,
) -> c_int {
    (methods(f).xRead.unwrap())(real(f), buf, amt, off)
}

unsafe extern "C" fn shim_write(
    f: *mut ffi::sqlite3_file,
    buf: *const c_void,
    amt: c_int,
    off: ffi::sqlite3_int64,
) -> c_int {
    (methods(f).xWrite.unwrap())(real(f), buf, amt, off)
}

unsafe extern "C" fn shim_truncate(f: *mut ffi::sqlite3_file, size: ffi::sqlite3_int64) -> c_int {
    (methods(f).xTruncate.unwrap())(real(f), size)
}

unsafe extern "C" fn shim_file_size(
    f: *mut ffi::sqlite3_file,
    size: *mut ffi::sqlite3_int64,
) -> c_int {
    (methods(f).xFileSize.unwrap())(real(f), size)
}

unsafe extern "C" fn shim_lock(f: *mut ffi::sqlite3_file, level: c_int) -> c_int {
    (methods(f).xLock.unwrap())(real(f), level)
}

unsafe extern "C" fn shim_unlock(f: *mut ffi::sqlite3_file, level: c_int) -> c_int {
    (methods(f).xUnlock.unwrap())(real(f), level)
}

unsafe extern "C" fn shim_check_reserved_lock(f: *mut ffi::sqlite3_file, out: *mut c_int) -> c_int {
    (methods(f).xCheckReservedLock.unwrap())(real(f), out)
}

unsafe extern "C" fn shim_file_control(
    f: *mut ffi::sqlite3_file,
    op: c_int,
    arg: *mut c_void,
) -> c_int {
    (methods(f).xFileControl.unwrap())(real(f), op, arg)
}

unsafe extern "C" fn shim_sector_size(f: *mut ffi::sqlite3_file) -> c_int {
    (methods(f).xSectorSize.unwrap())(real(f))
}

unsafe extern "C" fn shim_device_characteristics(f: *mut ffi::sqlite3_file) -> c_int {
    (methods(f).xDeviceCharacteristics.unwrap())(real(f))
}

unsafe extern "C" fn shim_shm_map(
    f: *mut ffi::sqlite3_file,
    page: c_int,
    size: c_int,
    extend: c_int,
    out: *mut *mut c_void,
) -> c_int {
    (methods(f).xShmMap.unwrap())(real(f), page, size, extend, out)
}

unsafe extern "C" fn shim_shm_lock(
    f: *mut ffi::sqlite3_file,
    offset: c_int,
    n: c_int,
    flags: c_int,
) -> c_int {
    (methods(f).xShmLock.unwrap())(real(f), offset, n, flags)
}

unsafe extern "C" fn shim_shm_barrier(f: *mut ffi::sqlite3_file) {
    (methods(f).xShmBarrier.unwrap())(real(f))
}

unsafe extern "C" fn shim_shm_unmap(f: *mut ffi::sqlite3_file, delete: c_int) -> c_int {
    (methods(f).xShmUnmap.unwrap())(real(f), delete)
}

/// Writes, for each of `state.db` and `state.db-wal` in `from`, its contents at its last fsync
/// into `to`; a file never fsynced is left out (its contents are lost).
fn write_crash_image(from: &Path, to: &Path) {
    let from = from.canonicalize().unwrap();
    let synced = synced().lock().unwrap();
    let mut written = 0;
    for f in FILES {
        if let Some(bytes) = synced.get(&from.join(f)) {
            std::fs::write(to.join(f), bytes).unwrap();
            written += 1;
        }
    }
    assert!(
        written > 0,
        "no fsynced file under {} (is the shim VFS in use?)",
        from.display()
    );
}

// ---------------------------------------------------------------------------------------------
// Model 3: a random subset of the unsynced blocks survives, the last one torn.

/// The directory whose files are captured just before each fsync (model 3), if any.
fn pre_sync_dir() -> &'static Mutex<Option<PathBuf>> {
    static DIR: OnceLock<Mutex<Option<PathBuf>>> = OnceLock::new();
    DIR.get_or_init(|| Mutex::new(None))
}

/// One moment just before an fsync: each file's bytes at its last fsync, and as the page cache
/// holds them now.
struct PreSync {
    synced: HashMap<&'static str, Vec<u8>>,
    current: HashMap<&'static str, Vec<u8>>,
}

fn pre_syncs() -> &'static Mutex<Vec<PreSync>> {
    static LIST: OnceLock<Mutex<Vec<PreSync>>> = OnceLock::new();
    LIST.get_or_init(|| Mutex::new(Vec::new()))
}

/// Called by the shim before each `xSync`: when `path` is in the watched directory, captures
/// both files (the commit about to be fsynced is written but not yet durable).
fn record_pre_sync(path: &Path) {
    let Some(dir) = pre_sync_dir().lock().unwrap().clone() else {
        return;
    };
    if path.parent() != Some(dir.as_path()) {
        return;
    }
    let synced = synced().lock().unwrap();
    let mut snap = PreSync {
        synced: HashMap::new(),
        current: HashMap::new(),
    };
    for f in FILES {
        if let Some(b) = synced.get(&dir.join(f)) {
            snap.synced.insert(f, b.clone());
        }
        if let Ok(b) = std::fs::read(dir.join(f)) {
            snap.current.insert(f, b);
        }
    }
    drop(synced);
    pre_syncs().lock().unwrap().push(snap);
}

/// splitmix64: seeded, so a failing image can be rebuilt.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

const BLOCK: usize = 4096;
const SECTOR: usize = 512;

/// The crash image of one file: its bytes at the last fsync, plus each 4 KiB block the page
/// cache holds differently with a probability drawn per image (1/2, 4/5 or 19/20); in half the
/// images the last surviving block keeps only its first 1..=7 sectors (torn). Blocks past the synced length that did not survive read as zeros when
/// a later block did. Returns the image and how many blocks survived (torn included).
fn partial_image(synced: &[u8], current: &[u8], rng: &mut Rng) -> (Vec<u8>, usize) {
    let blocks = current.len().max(synced.len()).div_ceil(BLOCK);
    let dirty: Vec<usize> = (0..blocks)
        .filter(|b| {
            let r = b * BLOCK..((b + 1) * BLOCK);
            let get = |v: &[u8]| v.get(r.start..r.end.min(v.len())).unwrap_or(&[]).to_vec();
            get(synced) != get(current)
        })
        .collect();
    // Per image: how likely a block survives (1/2, 4/5 or 19/20) and whether the last one tears.
    let keep = [500, 800, 950][(rng.next() % 3) as usize];
    let tear = rng.next().is_multiple_of(2);
    let surviving: Vec<usize> = dirty
        .into_iter()
        .filter(|_| rng.next() % 1000 < keep)
        .collect();
    let mut image = synced.to_vec();
    for (i, b) in surviving.iter().enumerate() {
        let start = b * BLOCK;
        let mut end = ((b + 1) * BLOCK).min(current.len());
        if tear && i + 1 == surviving.len() {
            let sectors = 1 + (rng.next() % 7) as usize;
            end = end.min(start + sectors * SECTOR);
        }
        if end <= start {
            continue;
        }
        if image.len() < end {
            image.resize(end, 0);
        }
        image[start..end].copy_from_slice(&current[start..end]);
    }
    (image, surviving.len())
}

fn write_partial_image(snap: &PreSync, to: &Path, rng: &mut Rng) -> usize {
    let mut survived = 0;
    for f in FILES {
        let synced = snap.synced.get(f).map(Vec::as_slice).unwrap_or(&[]);
        let current = snap.current.get(f).map(Vec::as_slice).unwrap_or(&[]);
        let (image, n) = partial_image(synced, current, rng);
        survived += n;
        if !image.is_empty() {
            std::fs::write(to.join(f), image).unwrap();
        }
    }
    survived
}

fn seed() -> u64 {
    let seed = std::env::var("AWARE_POWER_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    eprintln!("power_loss: seed {seed} (AWARE_POWER_SEED={seed} replays it)");
    seed
}

/// The partial-image tests share the process-wide capture; one at a time.
fn capture_lock() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

/// Model 3 at `full`: images taken just before each commit's WAL fsync, with a random subset
/// of the in-flight commit's blocks and a torn last block. The in-flight append was not
/// answered, so it may be there or not; every answered one must be, and none is reissued.
#[test]
fn full_torn_and_partial_unsynced_pages_lose_no_answered_sequence() {
    let _one = capture_lock();
    install_sync_recording_vfs();
    let seed = seed();
    let mut rng = Rng(seed);
    let dir = tempfile::tempdir().unwrap();
    let e = open(&dir.path().join("state.db"), Durability::Full);
    create_pair(&e);
    *pre_sync_dir().lock().unwrap() = Some(dir.path().canonicalize().unwrap());
    pre_syncs().lock().unwrap().clear();
    let mut answered: Vec<i64> = Vec::new();
    let (mut images, mut with_unsynced, mut in_flight_kept) = (0, 0, 0);
    for i in 0..20 {
        let seq = append(&e, i);
        let snaps: Vec<PreSync> = std::mem::take(&mut *pre_syncs().lock().unwrap());
        for snap in &snaps {
            for _ in 0..3 {
                let crash = tempfile::tempdir().unwrap();
                let survived = write_partial_image(snap, crash.path(), &mut rng);
                let r = recover(crash.path(), Durability::Full);
                images += 1;
                with_unsynced += usize::from(survived > 0);
                let lost: Vec<i64> = answered
                    .iter()
                    .copied()
                    .filter(|s| !r.sequences.contains(s))
                    .collect();
                assert!(
                    lost.is_empty(),
                    "seed {seed}, append {i}: answered {lost:?} lost ({survived} unsynced \
                     blocks kept)"
                );
                let max_answered = answered.last().copied().unwrap_or(0);
                assert!(
                    r.head >= max_answered,
                    "seed {seed}: head {} < {max_answered}",
                    r.head
                );
                assert!(r.cursor.2 >= max_answered, "seed {seed}: material lost");
                assert!(
                    r.next > max_answered && r.next > r.head,
                    "seed {seed}, append {i}: sequence {} reissued (answered up to \
                     {max_answered}, head {})",
                    r.next,
                    r.head
                );
                in_flight_kept += usize::from(r.sequences.contains(&seq));
            }
        }
        answered.push(seq);
    }
    *pre_sync_dir().lock().unwrap() = None;
    e.close();
    assert!(images >= 20, "only {images} pre-fsync images were taken");
    assert!(
        with_unsynced > 0,
        "seed {seed}: no image kept an unsynced block; the model did not exercise anything"
    );
    eprintln!(
        "power_loss (partial unsynced pages, torn last, full): {images} images, {with_unsynced} \
         with unsynced blocks kept, the in-flight append present in {in_flight_kept}; no \
         answered sequence lost or reissued"
    );
}

/// Model 3 at `normal`: ten answered appends, none fsynced; images with a random subset of
/// their WAL blocks and a torn last one. Appends may be lost (01 §8), but only from the end:
/// what survives is a prefix of the answered appends, and the store is consistent.
#[test]
fn normal_partial_unsynced_pages_recover_a_prefix() {
    let _one = capture_lock();
    install_sync_recording_vfs();
    let seed = seed();
    let mut rng = Rng(seed);
    let dir = tempfile::tempdir().unwrap();
    let e = open(&dir.path().join("state.db"), Durability::Normal);
    create_pair(&e);
    e.store().maintain().unwrap();
    let setup_head = e.version(&sref(CHILD));
    let answered: Vec<i64> = (0..10).map(|i| append(&e, i)).collect();
    let from = dir.path().canonicalize().unwrap();
    let snap = {
        let synced = synced().lock().unwrap();
        let mut snap = PreSync {
            synced: HashMap::new(),
            current: HashMap::new(),
        };
        for f in FILES {
            if let Some(b) = synced.get(&from.join(f)) {
                snap.synced.insert(f, b.clone());
            }
            if let Ok(b) = std::fs::read(from.join(f)) {
                snap.current.insert(f, b);
            }
        }
        snap
    };
    let mut kept_counts = Vec::new();
    for _ in 0..24 {
        let crash = tempfile::tempdir().unwrap();
        write_partial_image(&snap, crash.path(), &mut rng);
        let r = recover(crash.path(), Durability::Normal);
        let kept: Vec<i64> = answered
            .iter()
            .copied()
            .filter(|s| r.sequences.contains(s))
            .collect();
        assert_eq!(
            kept,
            answered[..kept.len()],
            "seed {seed}: the surviving appends are not a prefix of the answered ones"
        );
        let want_head = kept.last().copied().unwrap_or(setup_head);
        assert_eq!(r.head, want_head, "seed {seed}: head");
        assert!(
            r.next > r.head,
            "seed {seed}: next {} <= head {}",
            r.next,
            r.head
        );
        kept_counts.push(kept.len());
    }
    e.close();
    eprintln!(
        "power_loss (partial unsynced pages, torn last, normal): answered appends kept per \
         image {kept_counts:?}, each a prefix"
    );
}
