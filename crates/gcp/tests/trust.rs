//! One trust policy for every client: the Cloud Storage calls (plain reqwest) and Google's clients
//! (TPU here) both trust the system store, which honours `SSL_CERT_FILE`, as a corporate
//! TLS-inspecting proxy needs. The server is `openssl s_server` with a certificate of a private CA
//! that only `SSL_CERT_FILE` names; `-www` answers every request with an HTML status page, so a
//! client that trusts the CA gets a reply it cannot decode (`Unreadable`), and a client that does
//! not fails the handshake (`Transient`, a certificate error).
//!
//! `SSL_CERT_FILE` is process-global: this file holds one test, which sets it first.

use std::{
    net::TcpListener,
    path::Path,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use tpu_operator_gcp::{CredentialsMode, ErrorKind, Gcp, GcpConfig, GcpMetrics};

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run openssl");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A private CA and a certificate for 127.0.0.1 signed by it.
fn certificates(dir: &Path) {
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-days",
            "2",
            "-subj",
            "/CN=tpu-operator test CA",
        ],
    );
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            "/CN=127.0.0.1",
        ],
    );
    std::fs::write(dir.join("san.ext"), "subjectAltName=IP:127.0.0.1\n").unwrap();
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "server.pem",
            "-days",
            "2",
            "-extfile",
            "san.ext",
        ],
    );
}

#[tokio::test]
async fn storage_and_google_clients_trust_the_same_store() {
    let dir = tempfile_dir();
    certificates(&dir);
    // SAFETY: the only test of this process, before any client (or other thread of ours) exists.
    #[allow(unsafe_code)]
    unsafe {
        std::env::set_var("SSL_CERT_FILE", dir.join("ca.pem"));
        std::env::remove_var("SSL_CERT_DIR");
    }
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();

    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let _server = Server(
        Command::new("openssl")
            .args([
                "s_server",
                "-quiet",
                "-www",
                "-cert",
                "server.pem",
                "-key",
                "server.key",
            ])
            .args(["-accept", &format!("127.0.0.1:{port}")])
            .current_dir(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("openssl s_server"),
    );
    let started = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "s_server did not listen"
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    let base = format!("https://127.0.0.1:{port}");
    let config = GcpConfig {
        tpu_endpoint: base.clone(),
        dataproc_endpoint: base.clone(),
        vertex_endpoint: base.clone(),
        storage_endpoint: base.clone(),
        compute_endpoint: base,
        credentials: CredentialsMode::Anonymous,
        call_timeout: Duration::from_secs(10),
        ..GcpConfig::production()
    };
    let gcp = Gcp::connect(config, GcpMetrics::new())
        .await
        .expect("clients build");

    let tpu = gcp
        .tpu
        .get_node("projects/p/locations/us-central2-b/nodes/n")
        .await
        .expect_err("an HTML page is not a node");
    let storage = gcp
        .storage
        .prefix_exists("gs://bucket/out/")
        .await
        .expect_err("an HTML page is not a listing");
    println!("tpu: {tpu}\nstorage: {storage}");
    // A reply arrived over TLS: the private CA of SSL_CERT_FILE is trusted by both.
    assert_eq!(tpu.kind, ErrorKind::Unreadable, "{tpu}");
    assert_eq!(storage.kind, ErrorKind::Unreadable, "{storage}");
}

fn tempfile_dir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("tpu-operator-trust-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
