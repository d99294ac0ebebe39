//! Test certificates: a CA and leaves it signs (rcgen), as PEM.

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, SanType};

pub struct Ca {
    params: CertificateParams,
    key: KeyPair,
    pub pem: String,
}

pub fn ca(name: &str) -> Ca {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.distinguished_name.push(DnType::CommonName, name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let key = KeyPair::generate().unwrap();
    let pem = params.self_signed(&key).unwrap().pem();
    Ca { params, key, pem }
}

impl Ca {
    /// The CA's private key (PKCS#8 PEM), e.g. to plug it into meshflow (`--ca-key`).
    pub fn key_pem(&self) -> String {
        self.key.serialize_pem()
    }
}

/// A leaf certificate signed by `ca` for `dns` names, 127.0.0.1 and an optional URI SAN:
/// (cert PEM, key PEM).
pub fn leaf(ca: &Ca, dns: &[&str], uri: Option<&str>) -> (String, String) {
    let mut params =
        CertificateParams::new(dns.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
    params
        .subject_alt_names
        .push(SanType::IpAddress("127.0.0.1".parse().unwrap()));
    if let Some(u) = uri {
        params
            .subject_alt_names
            .push(SanType::URI(u.try_into().unwrap()));
    }
    let key = KeyPair::generate().unwrap();
    let issuer = Issuer::from_params(&ca.params, &ca.key);
    (
        params.signed_by(&key, &issuer).unwrap().pem(),
        key.serialize_pem(),
    )
}

/// The DER of the first certificate in `pem`: what a TLS client is handed, to compare with.
pub fn der_of(pem: &str) -> Vec<u8> {
    use tokio_rustls::rustls::pki_types::pem::PemObject;
    tokio_rustls::rustls::pki_types::CertificateDer::pem_slice_iter(pem.as_bytes())
        .next()
        .expect("a certificate")
        .expect("PEM")
        .to_vec()
}
