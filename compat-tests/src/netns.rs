//! Private network namespaces for the partition tests (`src/jepsen/`).
//!
//! [`Net::create`] makes one Linux network namespace per node, each with a
//! veth pair whose other end sits on a bridge in the root namespace, on a
//! private `10.213.X.0/24` that exists only on that bridge and inside the
//! namespaces (node `i` is `.i+1`, the bridge `.254`). Clients in the root
//! namespace reach the nodes through the bridge; cuts are `iptables` rules
//! inside the node namespaces (`ip netns exec NS iptables ...`), so the
//! bridge itself never filters and the root namespace's tables are never
//! touched. Nothing is routed off the bridge: no address but loopback and
//! these namespaces is ever used.
//!
//! Every name carries a tag made of the harness's pid (`smj` + 6 hex
//! digits), so two runs never share a name. [`Net`] tears everything down
//! when it drops, also when a panic unwinds; [`clean_stale`] removes what a
//! run that died without unwinding (SIGKILL) left behind, and kills the
//! node processes still inside its namespaces, by pid.

use std::net::Ipv4Addr;
use std::process::Command;

/// What every name of this harness starts with.
pub const PREFIX: &str = "smj";

/// The second octet of the private /24s: 10.213.X.0/24.
const NET_OCTET: u8 = 213;

/// One run's namespaces, veths and bridge.
pub struct Net {
    tag: String,
    third_octet: u8,
    nodes: usize,
    live: bool,
}

/// Run `ip`/`iptables` with `args`; panics with its stderr on failure.
fn run(program: &str, args: &[&str]) -> String {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("run {program}: {e} (is it installed?)"));
    assert!(
        out.status.success(),
        "{program} {} failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Like [`run`], but a failure is only reported (teardown goes on).
fn run_quiet(program: &str, args: &[&str]) -> bool {
    match Command::new(program).args(args).output() {
        Ok(out) if out.status.success() => true,
        Ok(out) => {
            eprintln!(
                "netns: {program} {} failed: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            );
            false
        }
        Err(e) => {
            eprintln!("netns: {program}: {e}");
            false
        }
    }
}

/// The tag of the current process: `smj` + its pid in 6 hex digits.
fn own_tag() -> String {
    format!("{PREFIX}{:06x}", std::process::id() & 0xff_ffff)
}

/// The pid a tag was made from, if `name` starts with one.
fn tag_pid(name: &str) -> Option<u32> {
    let hex = name.strip_prefix(PREFIX)?.get(..6)?;
    u32::from_str_radix(hex, 16).ok()
}

/// Whether the run that made `name` is still alive (and is not us).
fn is_live_other_run(name: &str) -> bool {
    let Some(pid) = tag_pid(name) else {
        return false;
    };
    if pid == std::process::id() & 0xff_ffff {
        return false;
    }
    let me = std::fs::read_to_string("/proc/self/comm").unwrap_or_default();
    std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c == me)
}

/// Kill (SIGKILL, by pid) every process inside namespace `ns`: only node
/// processes this harness started live there.
fn kill_inside(ns: &str) {
    let pids = Command::new("ip")
        .args(["netns", "pids", ns])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    for pid in pids.split_whitespace() {
        run_quiet("kill", &["-KILL", pid]);
    }
}

/// Remove the namespaces, veths and bridges of earlier runs of this harness
/// whose process is gone (a run killed by SIGKILL cannot clean up after
/// itself). Live runs are left alone.
pub fn clean_stale() {
    let list = run("ip", &["netns", "list"]);
    for name in list.lines().filter_map(|l| l.split_whitespace().next()) {
        if name.starts_with(PREFIX) && tag_pid(name).is_some() && !is_live_other_run(name) {
            eprintln!("netns: removing stale namespace {name}");
            kill_inside(name);
            run_quiet("ip", &["netns", "del", name]);
        }
    }
    let links = run("ip", &["-o", "link", "show"]);
    for name in links.lines().filter_map(|l| {
        let n = l.split(": ").nth(1)?;
        Some(n.split('@').next().unwrap_or(n).to_string())
    }) {
        if name.starts_with(PREFIX) && tag_pid(&name).is_some() && !is_live_other_run(&name) {
            eprintln!("netns: removing stale link {name}");
            run_quiet("ip", &["link", "del", &name]);
        }
    }
}

/// A free 10.213.X.0/24: one no route of the root namespace touches.
fn free_subnet() -> u8 {
    let routes = run("ip", &["-4", "route", "show", "table", "all"]);
    let addrs = run("ip", &["-4", "-o", "addr", "show"]);
    let start = (std::process::id() % 250) as u8;
    (0..250u8)
        .map(|k| (start.wrapping_add(k) % 250) + 1)
        .find(|x| {
            let p = format!("10.{NET_OCTET}.{x}.");
            !routes.contains(&p) && !addrs.contains(&p)
        })
        .expect("a free 10.213.X.0/24")
}

impl Net {
    /// Create `nodes` namespaces on a new bridge. Stale runs are removed first.
    pub fn create(nodes: usize) -> Net {
        assert!((1..=9).contains(&nodes), "1 to 9 nodes");
        clean_stale();
        let mut net = Net {
            tag: own_tag(),
            third_octet: free_subnet(),
            nodes: 0,
            live: true,
        };
        let br = net.bridge();
        run("ip", &["link", "add", &br, "type", "bridge"]);
        let host = format!("{}/24", net.host_ip());
        run("ip", &["addr", "add", &host, "dev", &br]);
        run("ip", &["link", "set", &br, "up"]);
        for i in 0..nodes {
            net.nodes = i + 1;
            let ns = net.ns(i);
            let (outer, inner) = (format!("{}h{i}", net.tag), format!("{}v{i}", net.tag));
            run("ip", &["netns", "add", &ns]);
            run(
                "ip",
                &[
                    "link", "add", &outer, "type", "veth", "peer", "name", &inner,
                ],
            );
            run("ip", &["link", "set", &inner, "netns", &ns]);
            run("ip", &["link", "set", &outer, "master", &br]);
            run("ip", &["link", "set", &outer, "up"]);
            let addr = format!("{}/24", net.ip(i));
            run("ip", &["-n", &ns, "addr", "add", &addr, "dev", &inner]);
            run("ip", &["-n", &ns, "link", "set", &inner, "up"]);
            run("ip", &["-n", &ns, "link", "set", "lo", "up"]);
            // No default route: nothing leaves the /24.
            net.iptables(i, &["-F"]);
        }
        net
    }

    /// The run's tag (`smj` + pid), the prefix of all its names.
    pub fn tag(&self) -> &str {
        &self.tag
    }

    fn bridge(&self) -> String {
        format!("{}br", self.tag)
    }

    /// Namespace name of node `i` (0-based).
    pub fn ns(&self, i: usize) -> String {
        format!("{}n{}", self.tag, i + 1)
    }

    /// Address of node `i` (0-based).
    pub fn ip(&self, i: usize) -> Ipv4Addr {
        Ipv4Addr::new(10, NET_OCTET, self.third_octet, i as u8 + 1)
    }

    /// The bridge's address in the root namespace, where clients come from.
    pub fn host_ip(&self) -> Ipv4Addr {
        Ipv4Addr::new(10, NET_OCTET, self.third_octet, 254)
    }

    /// Run `iptables ARGS` inside node `i`'s namespace.
    pub fn iptables(&self, i: usize, args: &[&str]) {
        let ns = self.ns(i);
        let mut all = vec!["netns", "exec", &ns, "iptables", "-w"];
        all.extend_from_slice(args);
        run("ip", &all);
    }

    /// Cut node `a` from node `b` both ways (rules in `a`'s namespace).
    pub fn cut(&self, a: usize, b: usize) {
        let peer = self.ip(b).to_string();
        self.iptables(a, &["-A", "INPUT", "-s", &peer, "-j", "DROP"]);
        self.iptables(a, &["-A", "OUTPUT", "-d", &peer, "-j", "DROP"]);
    }

    /// Cut what `from` sends on the connections it dials to `to`'s TCP
    /// `port`, and nothing else. Cluster connections are one-way (a node
    /// writes only on connections it dialed), so this loses every message
    /// from `from` to `to` while `to`'s messages to `from` still arrive.
    pub fn cut_dialed(&self, from: usize, to: usize, port: u16) {
        let peer = self.ip(to).to_string();
        let port = port.to_string();
        self.iptables(
            from,
            &[
                "-A", "OUTPUT", "-d", &peer, "-p", "tcp", "--dport", &port, "-j", "DROP",
            ],
        );
    }

    /// Isolate node `i` from every other node; the root namespace (clients)
    /// still reaches it.
    pub fn isolate(&self, i: usize) {
        for j in (0..self.nodes).filter(|j| *j != i) {
            self.cut(i, j);
        }
    }

    /// Remove every cut.
    pub fn heal(&self) {
        for i in 0..self.nodes {
            self.iptables(i, &["-F"]);
        }
    }

    /// Remove everything this run created; idempotent.
    pub fn teardown(&mut self) {
        if !self.live {
            return;
        }
        self.live = false;
        for i in 0..self.nodes {
            let ns = self.ns(i);
            kill_inside(&ns);
            // Deleting one end of a veth pair deletes both.
            run_quiet("ip", &["link", "del", &format!("{}h{i}", self.tag)]);
            run_quiet("ip", &["netns", "del", &ns]);
        }
        run_quiet("ip", &["link", "del", &self.bridge()]);
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        self.teardown();
    }
}
