//! Which HTTP version the model client speaks to a provider that offers HTTP/2.
//!
//! `tls/` holds a test CA (its key was thrown away) and a `localhost` / `127.0.0.1`
//! certificate it signed, with that certificate's key: test-only material.

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::Arc;

const CA: &[u8] = include_bytes!("tls/ca.pem");
const CERT: &[u8] = include_bytes!("tls/server.pem");
const KEY: &[u8] = include_bytes!("tls/server.key");

/// A TLS server on 127.0.0.1 offering `h2` and `http/1.1` (as a provider behind a CDN
/// does) for `connections` connections. Each connection's negotiated protocol is sent on
/// the channel; an HTTP/1.1 request gets `200 ok`, an HTTP/2 connection is dropped.
fn tls_server(connections: usize) -> (u16, tokio::sync::mpsc::UnboundedReceiver<Vec<u8>>) {
    fawn_net::install_tls_provider();
    let cert = CertificateDer::from_pem_slice(CERT).unwrap();
    let key = PrivateKeyDer::from_pem_slice(KEY).unwrap();
    let mut config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(vec![cert], key)
        .unwrap();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let config = Arc::new(config);
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for _ in 0..connections {
            let (mut sock, _) = listener.accept().unwrap();
            let mut conn = rustls::ServerConnection::new(config.clone()).unwrap();
            while conn.is_handshaking() {
                conn.complete_io(&mut sock).unwrap();
            }
            let protocol = conn.alpn_protocol().unwrap_or_default().to_vec();
            let h1 = protocol == b"http/1.1";
            tx.send(protocol).unwrap();
            if !h1 {
                continue;
            }
            let mut tls = rustls::Stream::new(&mut conn, &mut sock);
            let mut request = Vec::new();
            let mut buf = [0u8; 1024];
            while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = tls.read(&mut buf).unwrap();
                assert!(n > 0, "the client closed before its request ended");
                request.extend_from_slice(&buf[..n]);
            }
            tls.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok")
                .unwrap();
            tls.flush().unwrap();
            conn.send_close_notify();
            let _ = conn.complete_io(&mut sock);
        }
    });
    (port, rx)
}

#[tokio::test]
async fn model_calls_speak_http1_to_a_server_that_offers_http2() {
    let (port, mut protocols) = tls_server(2);
    let ca = reqwest::Certificate::from_pem(CA).unwrap();
    let url = format!("https://localhost:{port}/v1/models");

    let models = fawn_llm::model_http_builder()
        .add_root_certificate(ca.clone())
        .build()
        .unwrap();
    let r = models.get(&url).send().await.unwrap();
    assert_eq!(r.version(), reqwest::Version::HTTP_11);
    assert_eq!(r.text().await.unwrap(), "ok");
    assert_eq!(protocols.recv().await.unwrap(), b"http/1.1");

    // Control: a client with reqwest's defaults takes HTTP/2 from the same server (and
    // fails, as the server only answers HTTP/1.1), so the assertion above can fail.
    let defaults = fawn_net::client_builder()
        .add_root_certificate(ca)
        .build()
        .unwrap();
    assert!(defaults.get(&url).send().await.is_err());
    assert_eq!(protocols.recv().await.unwrap(), b"h2");
}
