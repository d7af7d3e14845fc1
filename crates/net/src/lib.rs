//! Outbound HTTPS for the whole process: the one place a `reqwest` client comes from.
//!
//! Owns: the TLS crypto provider. The workspace builds reqwest (and async-openai, rmcp)
//! without one, so that no C crypto library (`aws-lc-sys`) is compiled; rustls's *ring*
//! provider is installed for the process the first time [`client_builder`] or [`client`] is
//! called. A client built any other way would panic for want of a provider, so the
//! workspace's `clippy.toml` refuses `reqwest::Client::new`, `reqwest::Client::builder`,
//! `reqwest::ClientBuilder::new` and `reqwest::get` everywhere else.
//!
//! Must never know what is sent or to whom: models, webhooks, MCP servers, search providers
//! and telemetry destinations configure the builder they get from here.

use std::sync::Once;

/// Installs rustls's *ring* provider as the process default, once. If another provider was
/// installed first (a program embedding Fawn), that one stays: any provider serves reqwest.
pub fn install_tls_provider() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        // Err only when a provider is already installed, which is what this ensures.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// `reqwest::Client::builder()` with the TLS provider installed.
#[allow(clippy::disallowed_methods)] // the one sanctioned call
pub fn client_builder() -> reqwest::ClientBuilder {
    install_tls_provider();
    reqwest::Client::builder()
}

/// A client with reqwest's defaults, for tests, benchmarks and tools; panics, as
/// `reqwest::Client::new()` does, if the TLS backend cannot start. Request and run paths
/// use [`client_builder`] and handle the error.
#[allow(clippy::expect_used)]
pub fn client() -> reqwest::Client {
    client_builder()
        .build()
        .expect("the TLS backend (rustls with ring) failed to start")
}

#[cfg(test)]
mod tests {
    #[test]
    fn clients_build_and_the_provider_is_installed() {
        assert!(rustls::crypto::CryptoProvider::get_default().is_none());
        let _ = super::client();
        assert!(rustls::crypto::CryptoProvider::get_default().is_some());
        assert!(super::client_builder().https_only(true).build().is_ok());
    }
}
