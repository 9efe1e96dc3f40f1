//! Optional TLS for the socket server (`--tls-cert` / `--tls-key`), for clients that refuse plain
//! HTTP or tests that want the same transport as a real cluster. The emulator still does no
//! authentication: TLS only encrypts and lets clients verify the server.

use std::{io, net::SocketAddr, path::Path, sync::Arc, time::Duration};

use rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::{TlsAcceptor, server::TlsStream};

/// A handshake that has not finished by then is dropped, so a stalled client cannot hold the
/// accept loop (handshakes run one at a time; fine for a local emulator).
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// A server configuration from a PEM certificate chain and a PEM private key. HTTP/1.1 only
/// (ALPN), like the plain server.
pub fn server_config(cert: &Path, key: &Path) -> io::Result<Arc<rustls::ServerConfig>> {
    let invalid = |what: &str, path: &Path, e: &dyn std::fmt::Display| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{what} {}: {e}", path.display()),
        )
    };
    let chain = CertificateDer::pem_file_iter(cert)
        .map_err(|e| invalid("reading the certificate", cert, &e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| invalid("parsing the certificate", cert, &e))?;
    if chain.is_empty() {
        return Err(invalid(
            "no certificate in",
            cert,
            &"expected a PEM CERTIFICATE block",
        ));
    }
    let key_der =
        PrivateKeyDer::from_pem_file(key).map_err(|e| invalid("reading the private key", key, &e))?;
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| io::Error::other(format!("TLS protocol versions: {e}")))?
        .with_no_client_auth()
        .with_single_cert(chain, key_der)
        .map_err(|e| invalid("using the certificate and key", cert, &e))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// A TCP listener that completes a TLS handshake before handing the connection to axum.
pub struct TlsListener {
    tcp: TcpListener,
    acceptor: TlsAcceptor,
}

impl TlsListener {
    pub fn new(tcp: TcpListener, config: Arc<rustls::ServerConfig>) -> Self {
        Self {
            tcp,
            acceptor: TlsAcceptor::from(config),
        }
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let (stream, addr) = match self.tcp.accept().await {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!("accepting a connection: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, self.acceptor.accept(stream)).await {
                Ok(Ok(tls)) => return (tls, addr),
                Ok(Err(e)) => tracing::debug!(%addr, "TLS handshake failed: {e}"),
                Err(_) => tracing::debug!(%addr, "TLS handshake timed out"),
            }
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.tcp.local_addr()
    }
}
