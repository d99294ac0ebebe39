//! The least a change must send over Delta xDS ([`delta_min_bytes`]): what the bench's
//! "min bytes" counts, computed from the protobuf encoding of the smallest responses.

use dataflows::model::ResourceType;
use std::collections::BTreeMap;

/// The nonce length [`delta_min_bytes`] counts: 16 characters (64 random bits in hex, what
/// a server needs so a client cannot answer a response it never read; meshflow's own are a
/// little longer: the 16 and `-COUNTER`).
pub const MIN_NONCE_LEN: usize = 16;

/// Type URL of the Delta response an expected resource arrives in: an RDS name with a
/// `/` is a VHDS virtual host (`ROUTE/HOST`, as `bench --vhds` expects them: see `expected::to_expected`).
fn response_type_url(t: ResourceType, name: &str) -> &'static str {
    if t == ResourceType::Route && name.contains('/') {
        crate::xds::vhds::VIRTUAL_HOST_TYPE_URL
    } else {
        t.type_url()
    }
}

/// Encoded size of a length-delimited field `tag` of `len` bytes (prost omits an empty
/// one).
fn field_len(tag: u32, len: usize) -> usize {
    if len == 0 {
        return 0;
    }
    prost::encoding::key_len(tag) + prost::encoding::encoded_len_varint(len as u64) + len
}

/// The protobuf-encoded size of the smallest Delta xDS responses that deliver `changes`
/// — `(type, name, Some((version, body size)))` sent, `(type, name, None)` removed — one
/// `DeltaDiscoveryResponse` per type URL (batched, as one proxy's changes can be): its
/// `type_url` and a [`MIN_NONCE_LEN`] nonce, each resource with its name, version and the
/// `Any` of its body (type URL and bytes), each removed name. No `system_version_info`
/// (Delta does not need it). What the bench's simulated proxies count as bytes is the same
/// encoding of the responses they receive.
pub fn delta_min_bytes<'a>(
    changes: impl IntoIterator<Item = (ResourceType, &'a str, Option<(&'a str, usize)>)>,
) -> u64 {
    let mut per_url: BTreeMap<&'static str, usize> = BTreeMap::new();
    for (t, name, sent) in changes {
        let url = response_type_url(t, name);
        let field = match sent {
            // DeltaDiscoveryResponse.resources = 2: Resource { version = 1, resource = 2
            // (Any { type_url = 1, value = 2 }), name = 3 }.
            Some((version, len)) => {
                let any = field_len(1, url.len()) + field_len(2, len);
                field_len(
                    2,
                    field_len(1, version.len()) + field_len(2, any) + field_len(3, name.len()),
                )
            }
            // removed_resources = 6.
            None => field_len(6, name.len()),
        };
        *per_url.entry(url).or_default() += field;
    }
    per_url
        .into_iter()
        // type_url = 4, nonce = 5.
        .map(|(url, fields)| {
            (fields + field_len(4, url.len()) + field_len(5, MIN_NONCE_LEN)) as u64
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::envoy::service::discovery::v3::{DeltaDiscoveryResponse, Resource};
    use envoy_types::pb::google::protobuf::Any;
    use prost::Message;

    /// The computed minimum is the encoded size of the responses it describes: one per type
    /// URL (a VHDS virtual host's apart from its route configuration's), with a 16-character
    /// nonce.
    #[test]
    fn delta_min_bytes_is_the_encoded_size() {
        let body = |n: usize| vec![7u8; n];
        let changes = [
            (
                ResourceType::Endpoint,
                "outbound|80||a.ns.svc.cluster.local",
                Some(("0123456789abcdef", 342)),
            ),
            (
                ResourceType::Endpoint,
                "outbound|80|v1|a.ns.svc.cluster.local",
                Some(("fedcba9876543210", 200)),
            ),
            (
                ResourceType::Endpoint,
                "outbound|80|v9|a.ns.svc.cluster.local",
                None,
            ),
            (
                ResourceType::Route,
                "80",
                Some(("00000000000000aa", 70_000)),
            ),
            (
                ResourceType::Route,
                "80/a.ns.svc.cluster.local:80",
                Some(("00000000000000bb", 300)),
            ),
        ];
        let mut by_url: BTreeMap<&str, DeltaDiscoveryResponse> = BTreeMap::new();
        for (t, name, sent) in changes {
            let url = response_type_url(t, name);
            let r = by_url.entry(url).or_insert_with(|| DeltaDiscoveryResponse {
                type_url: url.into(),
                nonce: "0".repeat(MIN_NONCE_LEN),
                ..Default::default()
            });
            match sent {
                Some((version, len)) => r.resources.push(Resource {
                    name: name.into(),
                    version: version.into(),
                    resource: Some(Any {
                        type_url: url.into(),
                        value: body(len),
                    }),
                    ..Default::default()
                }),
                None => r.removed_resources.push(name.into()),
            }
        }
        assert_eq!(by_url.len(), 3);
        let encoded: usize = by_url.values().map(|r| r.encoded_len()).sum();
        assert_eq!(delta_min_bytes(changes), encoded as u64);
    }
}
