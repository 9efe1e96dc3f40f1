//! References a spec makes to other Google Cloud resources (networks, subnetworks, reservations,
//! boot images, Cloud Storage buckets), parsed strictly into (project, location, name) before
//! any policy compares them. Matching the text as written let `team-a-x/../../../team-b-train`
//! and URLs on another host pass a name pattern: here every segment must be a valid
//! Google Cloud name, the only URL host is `www.googleapis.com`, and nothing else is accepted.
//! Pure.

use std::fmt;

/// What a reference points at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Network,
    Subnetwork,
    Reservation,
    Image,
}

impl Kind {
    fn noun(self) -> &'static str {
        match self {
            Self::Network => "network",
            Self::Subnetwork => "subnetwork",
            Self::Reservation => "reservation",
            Self::Image => "image",
        }
    }

    /// The forms a reference of this kind may take, for error messages.
    pub fn accepted(self) -> &'static str {
        match self {
            Self::Network => {
                "NAME, global/networks/NAME, projects/PROJECT/global/networks/NAME or \
                 https://www.googleapis.com/compute/v1/projects/PROJECT/global/networks/NAME"
            }
            Self::Subnetwork => {
                "NAME, regions/REGION/subnetworks/NAME, projects/PROJECT/regions/REGION/subnetworks/NAME \
                 or https://www.googleapis.com/compute/v1/projects/PROJECT/regions/REGION/subnetworks/NAME"
            }
            Self::Reservation => "NAME or projects/PROJECT/locations/ZONE/reservations/NAME",
            Self::Image => {
                "global/images/NAME, global/images/family/NAME, projects/PROJECT/global/images/(family/)NAME \
                 or the same after https://www.googleapis.com/compute/v1/"
            }
        }
    }
}

/// A parsed reference. `location`: the region of a subnetwork, the zone of a reservation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reference {
    pub kind: Kind,
    pub project: String,
    pub location: Option<String>,
    /// The resource's name (an image family as `family/NAME`).
    pub name: String,
}

impl Reference {
    /// The canonical path, as policies compare it: `projects/P/global/networks/N`,
    /// `projects/P/regions/R/subnetworks/S`, `projects/P/locations/Z/reservations/R`,
    /// `projects/P/global/images/I`.
    pub fn path(&self) -> String {
        let (p, l, n) = (
            &self.project,
            self.location.as_deref().unwrap_or_default(),
            &self.name,
        );
        match self.kind {
            Kind::Network => format!("projects/{p}/global/networks/{n}"),
            Kind::Subnetwork => format!("projects/{p}/regions/{l}/subnetworks/{n}"),
            Kind::Reservation => format!("projects/{p}/locations/{l}/reservations/{n}"),
            Kind::Image => format!("projects/{p}/global/images/{n}"),
        }
    }
}

impl fmt::Display for Reference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.path())
    }
}

/// Why a reference was not accepted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Malformed {
    pub kind: Kind,
    pub value: String,
}

impl fmt::Display for Malformed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?} is not a {} reference the operator accepts (accepted: {})",
            self.value,
            self.kind.noun(),
            self.kind.accepted()
        )
    }
}

/// The only URL prefix accepted (the Compute Engine v1 API, as Google's APIs return self links).
pub const COMPUTE_URL: &str = "https://www.googleapis.com/compute/v1/";

/// A resource name (RFC 1035 label): lowercase letter, then letters, digits and `-`, not ending
/// in `-`, at most 63 characters.
fn is_name(s: &str) -> bool {
    let b = s.as_bytes();
    (1..=63).contains(&b.len())
        && b[0].is_ascii_lowercase()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[b.len() - 1] != b'-'
}

/// A project id (`my-project`, domain-scoped `example.com:my-project`; the length is not held to
/// Google's 6 characters, test projects are shorter) or a project number (as Vertex writes
/// network paths).
fn is_project(s: &str) -> bool {
    if !s.is_empty() && s.len() <= 20 && s.bytes().all(|c| c.is_ascii_digit()) {
        return true;
    }
    let id = match s.rsplit_once(':') {
        Some((domain, id)) => {
            let domain_ok = !domain.is_empty()
                && domain.split('.').all(|l| {
                    !l.is_empty()
                        && l.bytes()
                            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
                });
            if !domain_ok {
                return false;
            }
            id
        }
        None => s,
    };
    id.len() <= 30 && is_name(id)
}

/// A region (`us-east5`) or zone (`us-east5-b`): names whose dash-separated parts are lowercase
/// letters and digits.
fn is_location(s: &str) -> bool {
    is_name(s) && s.split('-').all(|p| !p.is_empty()) && s.contains('-')
}

/// The segments of `value` after the optional `https://www.googleapis.com/compute/v1/`. `None`
/// for another scheme or host, or an empty segment (`a//b`, a trailing `/`).
fn segments(value: &str, url_allowed: bool) -> Option<Vec<&str>> {
    let rest = match value.strip_prefix(COMPUTE_URL) {
        Some(rest) if url_allowed => rest,
        Some(_) => return None,
        None if value.contains("://") || value.starts_with("//") => return None,
        None => value,
    };
    let parts: Vec<&str> = rest.split('/').collect();
    parts.iter().all(|p| !p.is_empty()).then_some(parts)
}

fn malformed(kind: Kind, value: &str) -> Malformed {
    Malformed {
        kind,
        value: value.to_owned(),
    }
}

/// A network: short name (in `project`), `global/networks/N`, `projects/P/global/networks/N`,
/// or that path after [`COMPUTE_URL`].
pub fn network(value: &str, project: &str) -> Result<Reference, Malformed> {
    let bad = || malformed(Kind::Network, value);
    let (p, n) = match segments(value, true).ok_or_else(bad)?.as_slice() {
        [n] if !value.starts_with(COMPUTE_URL) => (project, *n),
        ["global", "networks", n] if !value.starts_with(COMPUTE_URL) => (project, *n),
        ["projects", p, "global", "networks", n] => (*p, *n),
        _ => return Err(bad()),
    };
    (is_project(p) && is_name(n))
        .then(|| Reference {
            kind: Kind::Network,
            project: p.to_owned(),
            location: None,
            name: n.to_owned(),
        })
        .ok_or_else(bad)
}

/// A subnetwork: short name (in `project` and `region`), `regions/R/subnetworks/S`,
/// `projects/P/regions/R/subnetworks/S`, or that path after [`COMPUTE_URL`].
pub fn subnetwork(value: &str, project: &str, region: &str) -> Result<Reference, Malformed> {
    let bad = || malformed(Kind::Subnetwork, value);
    let url = value.starts_with(COMPUTE_URL);
    let (p, r, s) = match segments(value, true).ok_or_else(bad)?.as_slice() {
        [s] if !url => (project, region, *s),
        ["regions", r, "subnetworks", s] if !url => (project, *r, *s),
        ["projects", p, "regions", r, "subnetworks", s] => (*p, *r, *s),
        _ => return Err(bad()),
    };
    (is_project(p) && is_location(r) && is_name(s))
        .then(|| Reference {
            kind: Kind::Subnetwork,
            project: p.to_owned(),
            location: Some(r.to_owned()),
            name: s.to_owned(),
        })
        .ok_or_else(bad)
}

/// A TPU reservation: short name (in `project` and `zone`, the object's) or
/// `projects/P/locations/Z/reservations/R`, the format `QueuedResource.reservationName`
/// documents.
pub fn reservation(value: &str, project: &str, zone: &str) -> Result<Reference, Malformed> {
    let bad = || malformed(Kind::Reservation, value);
    let (p, z, r) = match segments(value, false).ok_or_else(bad)?.as_slice() {
        [r] => (project, zone, *r),
        ["projects", p, "locations", z, "reservations", r] => (*p, *z, *r),
        _ => return Err(bad()),
    };
    (is_project(p) && is_location(z) && is_name(r))
        .then(|| Reference {
            kind: Kind::Reservation,
            project: p.to_owned(),
            location: Some(z.to_owned()),
            name: r.to_owned(),
        })
        .ok_or_else(bad)
}

/// A Compute Engine boot image: `global/images/I` or `global/images/family/F` (in `project`),
/// `projects/P/global/images/...`, or that path after [`COMPUTE_URL`].
pub fn image(value: &str, project: &str) -> Result<Reference, Malformed> {
    let bad = || malformed(Kind::Image, value);
    let (p, rest) = match segments(value, true).ok_or_else(bad)?.as_slice() {
        ["projects", p, "global", "images", rest @ ..] => (*p, rest.to_vec()),
        ["global", "images", rest @ ..] => (project, rest.to_vec()),
        _ => return Err(bad()),
    };
    let name = match rest.as_slice() {
        [i] if is_name(i) => (*i).to_owned(),
        ["family", f] if is_name(f) => format!("family/{f}"),
        _ => return Err(bad()),
    };
    is_project(p)
        .then(|| Reference {
            kind: Kind::Image,
            project: p.to_owned(),
            location: None,
            name,
        })
        .ok_or_else(bad)
}

/// The bucket of a `gs://BUCKET/...` URI or a bare bucket name; `None` when it is neither (a
/// bucket name is 3-63 characters of lowercase letters, digits, `-`, `_` and `.`, or dotted
/// names up to 222).
pub fn bucket(value: &str) -> Option<&str> {
    let b = match value.strip_prefix("gs://") {
        Some(rest) => rest.split('/').next().unwrap_or_default(),
        None => value,
    };
    let ok_chars = b
        .bytes()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, b'-' | b'_' | b'.'));
    let ends_ok = |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    (ok_chars
        && (3..=222).contains(&b.len())
        && ends_ok(b.chars().next())
        && ends_ok(b.chars().last())
        && !b.contains(".."))
    .then_some(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn networks_in_every_accepted_form() {
        for (value, path) in [
            ("team-a-x", "projects/team-a/global/networks/team-a-x"),
            ("global/networks/n1", "projects/team-a/global/networks/n1"),
            (
                "projects/host-1/global/networks/n1",
                "projects/host-1/global/networks/n1",
            ),
            (
                "projects/123456/global/networks/prod",
                "projects/123456/global/networks/prod",
            ),
            (
                "https://www.googleapis.com/compute/v1/projects/host-1/global/networks/n1",
                "projects/host-1/global/networks/n1",
            ),
            (
                "projects/example.com:proj-1/global/networks/n",
                "projects/example.com:proj-1/global/networks/n",
            ),
        ] {
            assert_eq!(network(value, "team-a").unwrap().path(), path, "{value}");
        }
    }

    #[test]
    fn traversal_other_hosts_and_extra_segments_are_refused() {
        for value in [
            "global/networks/team-a-x/../../../../team-b-train/global/networks/prod",
            "team-a-x/../../team-b",
            "..",
            "projects/team-b/global/networks/team-a-x/extra",
            "https://evil.example.com/compute/v1/projects/team-a/global/networks/team-a-x",
            "http://www.googleapis.com/compute/v1/projects/team-a/global/networks/team-a-x",
            "https://www.googleapis.com/compute/v1/team-a-x",
            "https://www.googleapis.com/compute/beta/projects/p-1234/global/networks/n",
            "//www.googleapis.com/compute/v1/projects/p-1234/global/networks/n",
            "projects//global/networks/n",
            "projects/team-a/global/networks/",
            "projects/team-a/regions/us-east5/subnetworks/s",
            "Team-A",
            "",
        ] {
            let err = network(value, "team-a").unwrap_err();
            assert!(
                err.to_string().contains("accepted: NAME, global/networks/NAME"),
                "{err}"
            );
        }
    }

    #[test]
    fn subnetworks_reservations_and_images() {
        let s = |v| subnetwork(v, "team-a", "us-east5").map(|r| r.path());
        assert_eq!(
            s("sub").unwrap(),
            "projects/team-a/regions/us-east5/subnetworks/sub"
        );
        assert_eq!(
            s("https://www.googleapis.com/compute/v1/projects/host-1/regions/us-west1/subnetworks/x")
                .unwrap(),
            "projects/host-1/regions/us-west1/subnetworks/x"
        );
        assert!(s("regions/us-east5/subnetworks/a/../../../b").is_err());
        assert!(s("https://example.com/compute/v1/projects/host-1/regions/us-west1/subnetworks/x").is_err());

        let r = |v| reservation(v, "team-a", "us-east5-b").map(|r| r.path());
        assert_eq!(
            r("res").unwrap(),
            "projects/team-a/locations/us-east5-b/reservations/res"
        );
        assert_eq!(
            r("projects/team-b-proj/locations/us-east5-b/reservations/theirs").unwrap(),
            "projects/team-b-proj/locations/us-east5-b/reservations/theirs"
        );
        for bad in [
            "projects/team-b-proj/locations/us-east5-b/reservations/a/b",
            "projects/team-b-proj/reservations/r",
            "https://www.googleapis.com/compute/v1/projects/team-b-proj/locations/us-east5-b/reservations/r",
            "../r",
        ] {
            assert!(r(bad).is_err(), "{bad}");
        }

        let i = |v| image(v, "team-a").map(|r| (r.project, r.name));
        assert_eq!(
            i("projects/ubuntu-os-cloud/global/images/family/ubuntu-2204-lts").unwrap(),
            ("ubuntu-os-cloud".into(), "family/ubuntu-2204-lts".into())
        );
        assert_eq!(i("global/images/mine").unwrap(), ("team-a".into(), "mine".into()));
        assert!(i("projects/p-1234/global/images/family/a/b").is_err());
        assert!(i("https://storage.googleapis.com/compute/v1/projects/p-1234/global/images/i").is_err());
    }

    #[test]
    fn buckets() {
        assert_eq!(bucket("gs://team-a-data/models/x/"), Some("team-a-data"));
        assert_eq!(bucket("gs://team-a-data"), Some("team-a-data"));
        assert_eq!(
            bucket("staging_bucket.example.com"),
            Some("staging_bucket.example.com")
        );
        for bad in [
            "gs://",
            "gs:///x",
            "gs://A/x",
            "gs://-a/x",
            "s3://team-a/x",
            "gs://a..b/x",
        ] {
            assert_eq!(bucket(bad), None, "{bad}");
        }
    }
}
