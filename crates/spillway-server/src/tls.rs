//! TLS with rustls (on the `ring` provider): the proxy's listener, whose certificate and key
//! are read from files at start and again at every reload, and the upstreams' `https://`
//! connections.

use crate::config::TlsFiles;
use arc_swap::ArcSwap;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use std::path::Path;
use std::sync::Arc;
use tokio_rustls::TlsAcceptor;

/// The one crypto provider spillway uses.
fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The certificates of a PEM file, in order; an error if it has none.
fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|err| format!("{}: {}", path.display(), pem_error(&err)))?;
    if certs.is_empty() {
        return Err(format!("{}: no PEM certificate in it", path.display()));
    }
    Ok(certs)
}

fn pem_error(err: &rustls::pki_types::pem::Error) -> String {
    match err {
        rustls::pki_types::pem::Error::Io(err) => format!("cannot read: {err}"),
        rustls::pki_types::pem::Error::NoItemsFound => "no PEM item in it".to_owned(),
        other => format!("not valid PEM: {other:?}"),
    }
}

/// The certificate chain and key of `files`, checked to belong together.
///
/// # Errors
///
/// A file that cannot be read, holds no certificate or key, or a key that is not the
/// certificate's: the message names the file.
pub(crate) fn certified_key(files: &TlsFiles) -> Result<Arc<CertifiedKey>, String> {
    let chain = certificates(&files.cert)?;
    let key = PrivateKeyDer::from_pem_file(&files.key)
        .map_err(|err| format!("{}: {}", files.key.display(), pem_error(&err)))?;
    CertifiedKey::from_der(chain, key, &provider())
        .map(Arc::new)
        .map_err(|err| {
            format!(
                "{} and {}: {err}",
                files.cert.display(),
                files.key.display()
            )
        })
}

/// The listener's certificate: swapped whole at a reload, so that each handshake sees one
/// certificate and key, old or new.
#[derive(Debug)]
struct Resolver {
    current: ArcSwap<CertifiedKey>,
}

impl ResolvesServerCert for Resolver {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.load_full())
    }
}

/// The proxy listener's TLS: an acceptor offering HTTP/2 and HTTP/1.1 by ALPN, with a
/// certificate that [`reload`](Self::reload) replaces for the handshakes that follow.
#[derive(Clone)]
pub struct ServerTls {
    resolver: Arc<Resolver>,
    acceptor: TlsAcceptor,
}

impl ServerTls {
    /// Reads the certificate chain and key of `files`.
    ///
    /// # Errors
    ///
    /// A file that cannot be read, holds no certificate or key, or a key that is not the
    /// certificate's: the message names the file.
    pub fn load(files: &TlsFiles) -> Result<Self, String> {
        Self::new(certified_key(files)?)
    }

    /// TLS with `cert`: TLS 1.2 and 1.3 with rustls' safe defaults, no client certificates.
    ///
    /// # Errors
    ///
    /// If the crypto provider supports none of those versions (ring supports both).
    pub(crate) fn new(cert: Arc<CertifiedKey>) -> Result<Self, String> {
        let resolver = Arc::new(Resolver {
            current: ArcSwap::new(cert),
        });
        let mut config = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|err| err.to_string())?
            .with_no_client_auth()
            .with_cert_resolver(resolver.clone());
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Self {
            resolver,
            acceptor: TlsAcceptor::from(Arc::new(config)),
        })
    }

    /// Reads `files` again; on an error the certificate in use stays.
    ///
    /// # Errors
    ///
    /// As [`load`](Self::load).
    pub fn reload(&self, files: &TlsFiles) -> Result<(), String> {
        self.replace(certified_key(files)?);
        Ok(())
    }

    /// Serves `cert` to the handshakes that follow.
    pub(crate) fn replace(&self, cert: Arc<CertifiedKey>) {
        self.resolver.current.store(cert);
    }

    /// The acceptor, for handshakes: its certificate is the one in use at each handshake.
    pub fn acceptor(&self) -> &TlsAcceptor {
        &self.acceptor
    }
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls").finish_non_exhaustive()
    }
}

/// The TLS client configuration for upstreams: the certificate authorities of `ca` (a PEM
/// file), or the bundled public ones (Mozilla's, from `webpki-roots`).
///
/// # Errors
///
/// A CA file that cannot be read, or holds no certificate or a bad one.
pub(crate) fn client_config(ca: Option<&Path>) -> Result<rustls::ClientConfig, String> {
    let mut roots = rustls::RootCertStore::empty();
    match ca {
        Some(path) => {
            for cert in certificates(path)? {
                roots
                    .add(cert)
                    .map_err(|err| format!("{}: {err}", path.display()))?;
            }
        }
        None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
    }
    Ok(rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|err| err.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn write(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
        let path = dir.join(name);
        std::fs::File::create(&path)
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
        path
    }

    fn pair(name: &str) -> (String, String) {
        let cert = rcgen::generate_simple_self_signed(vec![name.to_owned()]).unwrap();
        (cert.cert.pem(), cert.key_pair.serialize_pem())
    }

    #[test]
    fn a_certificate_and_its_key_load_and_reload() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = pair("one.test");
        let files = TlsFiles {
            cert: write(dir.path(), "cert.pem", &cert),
            key: write(dir.path(), "key.pem", &key),
        };
        let tls = ServerTls::load(&files).unwrap();
        let first = tls.resolver.current.load_full();
        let (cert, key) = pair("two.test");
        write(dir.path(), "cert.pem", &cert);
        write(dir.path(), "key.pem", &key);
        tls.reload(&files).unwrap();
        assert_ne!(tls.resolver.current.load_full().cert, first.cert);
    }

    #[test]
    fn bad_files_are_refused_with_their_name_and_the_certificate_in_use_stays() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = pair("one.test");
        let (_, other_key) = pair("two.test");
        let files = TlsFiles {
            cert: write(dir.path(), "cert.pem", &cert),
            key: write(dir.path(), "key.pem", &key),
        };
        let tls = ServerTls::load(&files).unwrap();
        let in_use = tls.resolver.current.load_full();
        let cases = [
            (
                TlsFiles {
                    cert: dir.path().join("missing.pem"),
                    key: files.key.clone(),
                },
                "missing.pem: cannot read",
            ),
            (
                TlsFiles {
                    cert: write(dir.path(), "empty.pem", "not pem\n"),
                    key: files.key.clone(),
                },
                "empty.pem: no PEM certificate in it",
            ),
            (
                TlsFiles {
                    cert: files.cert.clone(),
                    key: write(dir.path(), "nokey.pem", &cert),
                },
                "nokey.pem: no PEM item in it",
            ),
            (
                TlsFiles {
                    cert: files.cert.clone(),
                    key: write(dir.path(), "other.pem", &other_key),
                },
                "cert.pem and",
            ),
        ];
        for (bad, message) in cases {
            let err = tls.reload(&bad).unwrap_err();
            assert!(err.contains(message), "{err} lacks {message}");
            assert!(ServerTls::load(&bad).is_err());
        }
        assert_eq!(tls.resolver.current.load_full().cert, in_use.cert);
    }

    #[test]
    fn a_ca_file_replaces_the_public_roots() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, _) = pair("ca.test");
        let ca = write(dir.path(), "ca.pem", &cert);
        assert!(client_config(Some(&ca)).is_ok());
        assert!(client_config(None).is_ok());
        let err = client_config(Some(&dir.path().join("none.pem"))).unwrap_err();
        assert!(err.contains("none.pem: cannot read"), "{err}");
    }
}
