//! The paged list calls, followed page by page (at most [`MAX_PAGES`] of [`LIST_PAGE_SIZE`]
//! items) until the server returns no `next_page_token`.

use google_cloud_compute_v1::model::{Instance, ManagedInstance};

use super::ComputeClient;
use crate::{
    compute::Place,
    error::{Result, Service},
    tpu::{LIST_PAGE_SIZE, MAX_PAGES, too_many_pages},
};

impl ComputeClient {
    /// Every instance in a zone matching `filter`, all pages (`instances.list`).
    pub(super) async fn all_instances(&self, zone: &Place, filter: &str) -> Result<Vec<Instance>> {
        let target = zone.target("instances", "");
        let mut out = Vec::new();
        let mut token = String::new();
        for _ in 0..MAX_PAGES {
            let request = self
                .instances
                .list()
                .set_project(&zone.project)
                .set_zone(&zone.location)
                .set_filter(filter)
                .set_max_results(LIST_PAGE_SIZE as u32)
                .set_page_token(token);
            let page = self.call("instances.list", &target, request.send()).await?;
            out.extend(page.items);
            match page.next_page_token {
                Some(next) if !next.is_empty() => token = next,
                _ => return Ok(out),
            }
        }
        Err(too_many_pages(Service::Compute, "instances.list", &target))
    }

    /// The group's instances with their status and current action, all pages
    /// (`instanceGroupManagers.listManagedInstances`).
    pub(super) async fn all_managed_instances(
        &self,
        zone: &Place,
        manager: &str,
    ) -> Result<Vec<ManagedInstance>> {
        let target = zone.target("instanceGroupManagers", manager);
        let mut out = Vec::new();
        let mut token = String::new();
        for _ in 0..MAX_PAGES {
            let request = self
                .managers
                .list_managed_instances()
                .set_project(&zone.project)
                .set_zone(&zone.location)
                .set_instance_group_manager(manager)
                .set_max_results(LIST_PAGE_SIZE as u32)
                .set_page_token(token);
            let page = self
                .call(
                    "instanceGroupManagers.listManagedInstances",
                    &target,
                    request.send(),
                )
                .await?;
            out.extend(page.managed_instances);
            match page.next_page_token {
                Some(next) if !next.is_empty() => token = next,
                _ => return Ok(out),
            }
        }
        Err(too_many_pages(
            Service::Compute,
            "instanceGroupManagers.listManagedInstances",
            &target,
        ))
    }
}
