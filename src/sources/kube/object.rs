//! An object of a watched kind as the API server sends it, read so that one object that
//! cannot be decoded — nested deeper than JSON decoding allows (128 levels), say in a
//! `status` a namespace editor may write — is an error of that object alone: its list, its
//! watch and every other object of its kind go on.
//!
//! kube's client decodes a whole list page at once; with `DynamicObject` items, one deep
//! object failed the page, so the kind never listed (and the server never turned ready).
//! Here each item is first taken as raw JSON (skipping over nested values is not
//! recursive in serde_json, so any depth passes), then decoded on its own; what fails
//! keeps the name, namespace, uid and resourceVersion the watcher needs.

use kube::api::{ApiResource, DynamicObject, ObjectMeta};
use kube::core::DynamicResourceScope;
use kube::Resource;
use serde::{Deserialize, Deserializer};
use std::borrow::Cow;

/// One object of a watch: its metadata, and the object decoded or why it is not.
#[derive(Clone, Debug)]
pub struct KubeObject {
    pub metadata: ObjectMeta,
    pub decoded: Result<DynamicObject, String>,
}

/// The metadata an undecodable object still has (its `managedFields` can nest as deep as
/// the object: skipped).
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct Meta {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
}

#[derive(Deserialize, Default)]
struct MetaOnly {
    #[serde(default)]
    metadata: Meta,
}

impl KubeObject {
    /// Decodes one object's JSON text.
    pub fn from_json(text: &str) -> KubeObject {
        match serde_json::from_str::<DynamicObject>(text) {
            Ok(obj) => {
                let mut metadata = obj.metadata.clone();
                // The watcher reads names and versions; the copy need not carry these.
                metadata.managed_fields = None;
                KubeObject {
                    metadata,
                    decoded: Ok(obj),
                }
            }
            Err(e) => {
                let meta = serde_json::from_str::<MetaOnly>(text)
                    .map(|m| m.metadata)
                    .unwrap_or_default();
                KubeObject {
                    metadata: ObjectMeta {
                        name: meta.name,
                        namespace: meta.namespace,
                        uid: meta.uid,
                        resource_version: meta.resource_version,
                        ..Default::default()
                    },
                    decoded: Err(format!("the object cannot be decoded: {e}")),
                }
            }
        }
    }
}

impl<'de> Deserialize<'de> for KubeObject {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw: Box<serde_json::value::RawValue> = Deserialize::deserialize(d)?;
        Ok(KubeObject::from_json(raw.get()))
    }
}

impl Resource for KubeObject {
    type DynamicType = ApiResource;
    type Scope = DynamicResourceScope;

    fn group(dt: &ApiResource) -> Cow<'_, str> {
        dt.group.as_str().into()
    }

    fn version(dt: &ApiResource) -> Cow<'_, str> {
        dt.version.as_str().into()
    }

    fn kind(dt: &ApiResource) -> Cow<'_, str> {
        dt.kind.as_str().into()
    }

    fn api_version(dt: &ApiResource) -> Cow<'_, str> {
        dt.api_version.as_str().into()
    }

    fn plural(dt: &ApiResource) -> Cow<'_, str> {
        dt.plural.as_str().into()
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nested(depth: usize) -> String {
        format!("{}1{}", "[".repeat(depth), "]".repeat(depth))
    }

    /// A list page whose one item nests 300 levels decodes: that item is an error naming
    /// why, with its name and resourceVersion; the others are decoded as before.
    #[test]
    fn one_deep_object_does_not_fail_its_list() {
        let page = format!(
            r#"{{"apiVersion":"v1","kind":"List","metadata":{{"resourceVersion":"9"}},"items":[
              {{"metadata":{{"name":"ok","namespace":"default","resourceVersion":"7"}},"spec":{{"hosts":["a"]}}}},
              {{"metadata":{{"name":"deep","namespace":"default","resourceVersion":"8","managedFields":[{{"fieldsV1":{}}}]}},"status":{}}}
            ]}}"#,
            nested(300),
            nested(300)
        );
        let list: kube::core::ObjectList<KubeObject> =
            serde_json::from_str(&page).expect("the page decodes");
        assert_eq!(list.items.len(), 2);
        let ok = &list.items[0];
        assert_eq!(ok.metadata.name.as_deref(), Some("ok"));
        assert!(ok
            .decoded
            .as_ref()
            .is_ok_and(|o| o.data["spec"]["hosts"][0] == "a"));
        let deep = &list.items[1];
        assert_eq!(deep.metadata.name.as_deref(), Some("deep"));
        assert_eq!(deep.metadata.resource_version.as_deref(), Some("8"));
        let err = deep.decoded.as_ref().expect_err("too deep");
        assert!(err.contains("recursion limit"), "{err}");
    }
}
