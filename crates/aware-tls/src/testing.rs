//! A certificate authority made by the test (rcgen): a root, and leaf certificates for the
//! names and addresses a test serves on, written as PEM files (keys mode 0600, as PostgreSQL
//! insists).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use std::path::{Path, PathBuf};

/// A throw-away CA.
pub struct TestCa {
    issuer: Issuer<'static, KeyPair>,
    /// The CA certificate, PEM.
    pub cert_pem: String,
}

/// A leaf certificate and its key, PEM.
pub struct Leaf {
    pub cert_pem: String,
    pub key_pem: String,
}

impl TestCa {
    /// A CA named `name` (its common name).
    pub fn new(name: &str) -> TestCa {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, name);
        params.distinguished_name = dn;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let key = KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        TestCa {
            issuer: Issuer::new(params, key),
            cert_pem: cert.pem(),
        }
    }

    /// A certificate for `names` (DNS names or IP addresses) signed by this CA; the first name
    /// is also the common name.
    pub fn issue(&self, names: &[&str]) -> Leaf {
        let mut params =
            CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>())
                .unwrap();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, names.first().copied().unwrap_or("leaf"));
        params.distinguished_name = dn;
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        Leaf {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        }
    }

    /// Writes the CA certificate to `dir/ca.pem` and returns the path.
    pub fn write_ca(&self, dir: &Path) -> PathBuf {
        let p = dir.join("ca.pem");
        std::fs::write(&p, &self.cert_pem).unwrap();
        p
    }

    /// Issues a certificate for `names` and writes `dir/<stem>.crt` and `dir/<stem>.key` (0600).
    pub fn write_leaf(&self, dir: &Path, stem: &str, names: &[&str]) -> (PathBuf, PathBuf) {
        let leaf = self.issue(names);
        let cert = dir.join(format!("{stem}.crt"));
        let key = dir.join(format!("{stem}.key"));
        std::fs::write(&cert, &leaf.cert_pem).unwrap();
        std::fs::write(&key, &leaf.key_pem).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
        }
        (cert, key)
    }
}
