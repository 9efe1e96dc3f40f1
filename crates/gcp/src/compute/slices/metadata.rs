//! One metadata key set on a running slice's VMs (the operator's checkpoint request before a
//! maintenance): Compute Engine has no patch of a slice as a whole, so each VM's metadata is set
//! with `instances.setMetadata`, one VM per call.

use google_cloud_compute_v1::model::{Instance, Metadata, metadata::Items};
use google_cloud_longrunning::model::Operation;

use super::{ComputeSlices, zonal};
use crate::{compute::Place, error::Result};

/// Whether `instance` carries metadata `key` with `value`.
fn carries(instance: &Instance, key: &str, value: &str) -> bool {
    instance.metadata.as_ref().is_some_and(|m| {
        m.items
            .iter()
            .any(|i| i.key.as_deref() == Some(key) && i.value.as_deref() == Some(value))
    })
}

/// `instance`'s metadata with `key` set to `value`, its other items and its fingerprint as read:
/// a change made since the read fails the call (HTTP 412) instead of being overwritten.
fn with_key(instance: &Instance, key: &str, value: &str) -> Metadata {
    let read = instance.metadata.clone().unwrap_or_default();
    let mut items: Vec<Items> = read
        .items
        .iter()
        .filter(|i| i.key.as_deref() != Some(key))
        .cloned()
        .collect();
    items.push(Items::new().set_key(key).set_value(value));
    let mut metadata = Metadata::new().set_items(items);
    metadata.fingerprint = read.fingerprint;
    metadata
}

impl ComputeSlices {
    /// Sets metadata `key` to `value` on the first VM of slice `name`
    /// (`projects/{p}/locations/{zone}/nodes/{id}`) that does not carry it yet: its instance, or
    /// its group's members in the group's order. The started operation, or `None` once every VM
    /// carries it.
    pub async fn set_metadata_key(&self, name: &str, key: &str, value: &str) -> Result<Option<Operation>> {
        let (zone, vms) = self.vms(name, "instances.setMetadata").await?;
        for instance in &vms {
            if let Some(op) = self.set_on(&zone, instance, key, value).await? {
                return Ok(Some(op));
            }
        }
        Ok(None)
    }

    /// `instances.setMetadata` of `instance` with `key` set, unless it already carries it.
    async fn set_on(
        &self,
        zone: &Place,
        instance: &Instance,
        key: &str,
        value: &str,
    ) -> Result<Option<Operation>> {
        if carries(instance, key, value) {
            return Ok(None);
        }
        let vm = instance.name.as_deref().unwrap_or_default();
        let op = self
            .api
            .set_instance_metadata(zone, vm, with_key(instance, key, value))
            .await?;
        Ok(Some(zonal(zone, &op)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_is_added_or_replaced_and_the_rest_kept_with_the_fingerprint() {
        let read = Metadata::new()
            .set_items([
                Items::new().set_key("startup-script").set_value("#!/bin/bash"),
                Items::new()
                    .set_key("tpu-operator-checkpoint-request")
                    .set_value("old"),
            ])
            .set_fingerprint(bytes::Bytes::from_static(b"fp"));
        let instance = Instance::new().set_name("vm").set_metadata(read);
        assert!(carries(&instance, "tpu-operator-checkpoint-request", "old"));
        let sent = with_key(&instance, "tpu-operator-checkpoint-request", "new");
        assert_eq!(sent.fingerprint.as_deref(), Some(&b"fp"[..]));
        let items: Vec<(Option<&str>, Option<&str>)> = sent
            .items
            .iter()
            .map(|i| (i.key.as_deref(), i.value.as_deref()))
            .collect();
        assert_eq!(
            items,
            [
                (Some("startup-script"), Some("#!/bin/bash")),
                (Some("tpu-operator-checkpoint-request"), Some("new"))
            ]
        );
    }
}
