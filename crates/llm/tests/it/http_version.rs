//! How the model client uses connections: the HTTP version it speaks to a provider that offers
//! HTTP/2, and how many idle connections it keeps after a burst.
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

/// What the connection-counting server reports.
enum Seen {
    /// A request arrived on connection `id`; its answer waits for the sender.
    Request(usize, tokio::sync::oneshot::Sender<()>),
    /// The client closed connection `id`.
    Closed(usize),
}

/// A plain HTTP/1.1 server that holds each request's answer until the test releases it, so
/// that concurrent requests each take a connection of their own, and reports every request
/// and every connection the client closes. Returns its port.
async fn counting_server() -> (u16, tokio::sync::mpsc::UnboundedReceiver<Seen>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        for id in 0.. {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            let tx = tx.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 1024];
                loop {
                    match sock.read(&mut chunk).await {
                        Ok(0) | Err(_) => {
                            let _ = tx.send(Seen::Closed(id));
                            return;
                        }
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                    if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        buf.drain(..end + 4);
                        let (release, released) = tokio::sync::oneshot::channel();
                        let _ = tx.send(Seen::Request(id, release));
                        if released.await.is_err() {
                            return;
                        }
                        let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
                        if sock.write_all(answer).await.is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    (port, rx)
}

/// Sends `n` requests at once and answers them once all `n` have arrived; returns the
/// connections they arrived on.
async fn burst(
    client: &reqwest::Client,
    url: &str,
    n: usize,
    seen: &mut tokio::sync::mpsc::UnboundedReceiver<Seen>,
) -> std::collections::HashSet<usize> {
    let calls: Vec<_> = (0..n)
        .map(|_| {
            let request = client.get(url).send();
            tokio::spawn(async move { request.await.unwrap().text().await.unwrap() })
        })
        .collect();
    let mut held = Vec::new();
    let mut connections = std::collections::HashSet::new();
    while held.len() < n {
        match seen.recv().await.unwrap() {
            Seen::Request(id, release) => {
                connections.insert(id);
                held.push(release);
            }
            Seen::Closed(id) => panic!("connection {id} closed during the burst"),
        }
    }
    for release in held {
        release.send(()).unwrap();
    }
    for call in calls {
        assert_eq!(call.await.unwrap(), "ok");
    }
    connections
}

/// After a burst of concurrent model calls, the connections past the idle bound close at
/// once, and the bound's worth stays open for the next calls to reuse.
#[tokio::test]
async fn idle_model_connections_are_bounded_and_reused() {
    let (port, mut seen) = counting_server().await;
    let url = format!("http://127.0.0.1:{port}/v1/models");
    let client = fawn_llm::model_http_builder().build().unwrap();
    let extra = 4;
    let first = burst(
        &client,
        &url,
        fawn_llm::MODEL_POOL_MAX_IDLE + extra,
        &mut seen,
    )
    .await;
    assert_eq!(first.len(), fawn_llm::MODEL_POOL_MAX_IDLE + extra);
    // The pool drops a connection past its bound as the connection comes back, so these
    // closes follow the burst; the timeout only turns a missing close into a failure.
    let mut closed = std::collections::HashSet::new();
    while closed.len() < extra {
        let next = tokio::time::timeout(std::time::Duration::from_secs(60), seen.recv()).await;
        match next.expect("the connections past the idle bound stayed open") {
            Some(Seen::Closed(id)) => assert!(closed.insert(id)),
            Some(Seen::Request(..)) => panic!("a request nobody sent"),
            None => panic!("the server stopped"),
        }
    }
    // The kept connections carry the next burst: no new connection is opened.
    let second = burst(&client, &url, fawn_llm::MODEL_POOL_MAX_IDLE, &mut seen).await;
    assert!(second.is_subset(&first), "new connections were opened");
    assert!(second.is_disjoint(&closed));
}
