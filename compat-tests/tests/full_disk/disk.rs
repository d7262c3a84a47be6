//! Filesystems the tests make for the broker's data: a small tmpfs that
//! fills up, and an ext4 on a loop device whose writes fail with EIO.

use super::MIB;
use std::path::PathBuf;
use std::process::Command;

/// A tmpfs of its own, unmounted on drop.
pub(crate) struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    pub(crate) fn mount(size_mib: u64) -> Tmpfs {
        let dir = tempfile::tempdir().expect("temp dir");
        let mnt = dir.path().join("mnt");
        std::fs::create_dir(&mnt).expect("mount point");
        let status = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size_mib}m,mode=0700"),
                "tmpfs",
            ])
            .arg(&mnt)
            .status()
            .expect("run mount");
        assert!(
            status.success(),
            "mount -t tmpfs failed ({status}): the full-disk test runs as root, as CI does"
        );
        Tmpfs { dir }
    }

    pub(crate) fn path(&self) -> PathBuf {
        self.dir.path().join("mnt")
    }

    /// Bytes free on the filesystem (`df`'s avail column).
    pub(crate) fn free(&self) -> u64 {
        let out = Command::new("df")
            .args(["-B1", "--output=avail"])
            .arg(self.path())
            .output()
            .expect("run df");
        let text = String::from_utf8_lossy(&out.stdout);
        text.lines()
            .nth(1)
            .and_then(|l| l.trim().parse().ok())
            .unwrap_or_else(|| panic!("df printed {text:?}"))
    }

    /// Fill the filesystem until `leave` bytes are free, with a ballast file.
    pub(crate) fn fill_leaving(&self, leave: u64) {
        let free = self.free();
        assert!(free > leave, "only {free} bytes free, wanted {leave}");
        let ballast = self.path().join("ballast");
        let data = vec![0xa5u8; MIB as usize];
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&ballast)
            .expect("ballast");
        use std::io::Write;
        for _ in 0..(free - leave) / MIB {
            f.write_all(&data).expect("write the ballast");
        }
        f.sync_all().expect("sync the ballast");
    }

    pub(crate) fn free_ballast(&self) {
        std::fs::remove_file(self.path().join("ballast")).expect("delete the ballast");
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        // Lazy: a process that still holds a file must not keep it mounted.
        let _ = Command::new("umount").arg("-l").arg(self.path()).status();
    }
}

/// A disk whose writes fail with EIO: ext4 on a loop device whose backing
/// file is sparse and much larger than the small tmpfs it lives on. ext4
/// sees plenty of free space, so no write fails with ENOSPC; once the tmpfs
/// is full the loop driver cannot store a block, the write-back fails, and
/// `fsync` returns EIO (ext4 then remounts itself read-only, as its default
/// `errors=remount-ro` says, so later writes get EROFS). This is the kernel's
/// own EIO path; device-mapper's `error` target is not available here.
pub(crate) struct FailingDisk {
    backing: Tmpfs,
    /// The loop device, e.g. `/dev/loop3`.
    device: String,
}

/// Run a command as root; panics with its output when it fails.
fn run(what: &str, cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot run: {e}"));
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{what} failed ({}): {text}; the full-disk test runs as root, as CI does",
        out.status
    );
    text
}

impl FailingDisk {
    /// ext4 on an `image_mib` sparse image that only `backing_mib` of real
    /// space backs.
    pub(crate) fn mount(backing_mib: u64, image_mib: u64) -> FailingDisk {
        let backing = Tmpfs::mount(backing_mib);
        let image = backing.path().join("disk.img");
        run(
            "truncate",
            Command::new("truncate")
                .arg("-s")
                .arg(format!("{}", image_mib * MIB))
                .arg(&image),
        );
        run("mkfs.ext4", Command::new("mkfs.ext4").arg("-q").arg(&image));
        let device = run(
            "losetup",
            Command::new("losetup").args(["-f", "--show"]).arg(&image),
        )
        .trim()
        .to_string();
        let disk = FailingDisk { backing, device };
        std::fs::create_dir_all(disk.path()).expect("mount point");
        disk.mount_ext4();
        disk
    }

    fn mount_ext4(&self) {
        run(
            "mount ext4",
            Command::new("mount").arg(&self.device).arg(self.path()),
        );
    }

    /// Where the ext4 is mounted.
    pub(crate) fn path(&self) -> PathBuf {
        self.backing.dir.path().join("ext4")
    }

    /// Bytes ext4 reports free (`df`'s avail column).
    pub(crate) fn free(&self) -> u64 {
        let out = run(
            "df",
            Command::new("df")
                .args(["-B1", "--output=avail"])
                .arg(self.path()),
        );
        out.lines()
            .nth(1)
            .and_then(|l| l.trim().parse().ok())
            .unwrap_or_else(|| panic!("df printed {out:?}"))
    }

    /// Give the backing tmpfs room again, check and repair the ext4
    /// (`e2fsck -fy`, as an operator would after the disk came back), and
    /// mount it again. Returns what e2fsck said.
    pub(crate) fn repair(&self, backing_mib: u64) -> String {
        let _ = Command::new("umount").arg(self.path()).status();
        run(
            "grow the backing tmpfs",
            Command::new("mount")
                .arg("-o")
                .arg(format!("remount,size={backing_mib}m"))
                .arg(self.backing.path()),
        );
        // 0: clean, 1: errors corrected; anything else is a failure.
        let out = Command::new("e2fsck")
            .args(["-fy"])
            .arg(&self.device)
            .output()
            .expect("run e2fsck");
        let text = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(
            matches!(out.status.code(), Some(0) | Some(1)),
            "e2fsck could not repair the disk ({}): {text}",
            out.status
        );
        self.mount_ext4();
        text
    }
}

impl Drop for FailingDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(self.path()).status();
        let _ = Command::new("losetup").arg("-d").arg(&self.device).status();
        // The backing tmpfs unmounts itself after this.
    }
}
