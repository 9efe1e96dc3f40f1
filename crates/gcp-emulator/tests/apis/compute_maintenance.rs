//! Maintenance of Compute Engine TPU VMs through `google-cloud-compute-v1`:
//! `resourceStatus.upcomingMaintenance`, `instances.performMaintenance` /
//! `simulateMaintenanceEvent`, checkpoint requests through `instances.setMetadata`, and the
//! steps lost. The VM is RUNNING at 90 s (60 s provisioning + 30 s staging), its workload
//! checkpoints every 120 s (100 steps): step 100 at 210 s, 200 at 330 s, 250 at 390 s.

use crate::common;

use common::*;
use gcp_emulator::{Cause, Emulator, Fault};
use google_cloud_auth::credentials::anonymous::Builder as Anonymous;
use google_cloud_compute_v1::client::Instances;
use google_cloud_compute_v1::model::{Instance, Metadata, metadata, upcoming_maintenance};

const ZONE: &str = "us-east5-b";
const SCRIPT: &str = "#!/bin/bash\n# watches tpu-operator-checkpoint-request\ndocker run --rm -e 'CHECKPOINT_DIR=gs://ckpt/vm/' 'trainer:1' 'train.py'\n";

fn key(name: &str) -> String {
    format!("projects/p/zones/{ZONE}/instances/{name}")
}

fn items(request: Option<&str>) -> Metadata {
    let mut items = vec![
        metadata::Items::new().set_key("startup-script").set_value(SCRIPT),
        metadata::Items::new()
            .set_key("tpu-operator-done-uri")
            .set_value("gs://out/vm/"),
    ];
    if let Some(r) = request {
        items.push(
            metadata::Items::new()
                .set_key("tpu-operator-checkpoint-request")
                .set_value(r),
        );
    }
    Metadata::new().set_items(items)
}

/// A running VM `name` whose workload started at 90 s.
async fn running_vm(emu: &Emulator, name: &str) -> Instances {
    let c: Instances = Instances::builder()
        .with_endpoint(emu.url())
        .with_credentials(Anonymous::new().build())
        .build()
        .await
        .unwrap();
    let vm = Instance::new()
        .set_name(name)
        .set_machine_type(format!("zones/{ZONE}/machineTypes/ct6e-standard-4t"))
        .set_metadata(items(None));
    c.insert()
        .set_project("p")
        .set_zone(ZONE)
        .set_body(vm)
        .send()
        .await
        .unwrap();
    emu.clock().advance(secs(90));
    c
}

async fn notice(c: &Instances, name: &str) -> Option<google_cloud_compute_v1::model::UpcomingMaintenance> {
    let vm = c
        .get()
        .set_project("p")
        .set_zone(ZONE)
        .set_instance(name)
        .send()
        .await
        .unwrap();
    vm.resource_status.and_then(|s| s.upcoming_maintenance)
}

fn schedule(name: &str, start_in_secs: u64, can_reschedule: bool) -> Fault {
    Fault::ScheduleMaintenance {
        name: name.into(),
        start_in_secs,
        duration_secs: 600,
        can_reschedule,
        unscheduled: false,
    }
}

#[tokio::test]
async fn scheduled_window_loses_the_steps_since_the_last_checkpoint() {
    let emu = emulator().await;
    let c = running_vm(&emu, "vm-1").await;
    emu.inject(schedule("vm-1", 300, false)).unwrap();
    let n = notice(&c, "vm-1").await.expect("notice");
    assert_eq!(n.r#type, Some(upcoming_maintenance::Type::Scheduled));
    assert_eq!(
        n.maintenance_status,
        Some(upcoming_maintenance::MaintenanceStatus::Pending)
    );
    assert_eq!(n.can_reschedule, Some(false));
    assert_eq!(
        n.window_start_time.as_deref(),
        Some("2026-01-01T00:06:30.000000Z")
    );
    assert_eq!(n.window_end_time.as_deref(), Some("2026-01-01T00:16:30.000000Z"));
    let refused = c
        .perform_maintenance()
        .set_project("p")
        .set_zone(ZONE)
        .set_instance("vm-1")
        .send()
        .await;
    assert_eq!(http_status(&refused.unwrap_err()), 400);
    emu.clock().advance(secs(300));
    let n = notice(&c, "vm-1").await.expect("notice");
    assert_eq!(
        n.maintenance_status,
        Some(upcoming_maintenance::MaintenanceStatus::Ongoing)
    );
    let got = emu.workload_interruptions();
    assert_eq!(got[0].cause, Cause::Maintenance);
    assert_eq!(
        (
            got[0].step_at_interruption,
            got[0].committed_step,
            got[0].steps_lost
        ),
        (250, 200, 50)
    );
    emu.clock().advance(secs(600));
    assert!(notice(&c, "vm-1").await.is_none());
    // Restarted at 990 s from step 200: step 300 at 1110 s.
    emu.clock().advance(secs(120));
    assert!(emu.object("ckpt", "vm/300/_CHECKPOINT_METADATA").is_some());
}

#[tokio::test]
async fn checkpoint_request_through_set_metadata_then_perform_maintenance_loses_nothing() {
    let emu = emulator().await;
    let c = running_vm(&emu, "vm-2").await;
    emu.inject(schedule(&key("vm-2"), 3600, true)).unwrap();
    emu.clock().advance(secs(299));
    let set = || {
        c.set_metadata()
            .set_project("p")
            .set_zone(ZONE)
            .set_instance("vm-2")
    };
    // A write not based on the current metadata (no fingerprint, or a stale one) is refused.
    let stale = set()
        .set_body(items(Some("2026-01-01T00:06:29Z")))
        .send()
        .await
        .unwrap_err();
    assert_eq!(stale.http_status_code(), Some(412), "{stale}");
    let read = c.get().set_project("p").set_zone(ZONE).set_instance("vm-2");
    let fingerprint = read.send().await.unwrap().metadata.unwrap().fingerprint;
    let mut body = items(Some("2026-01-01T00:06:29Z"));
    body.fingerprint = fingerprint;
    set().set_body(body).send().await.unwrap();
    // 299 s of training: step 249, written at once.
    assert!(emu.object("ckpt", "vm/249/_CHECKPOINT_METADATA").is_some());
    assert_eq!(emu.checkpoint_requests()[0].step, 249);
    let op = c
        .perform_maintenance()
        .set_project("p")
        .set_zone(ZONE)
        .set_instance("vm-2")
        .send()
        .await
        .unwrap();
    assert_eq!(op.operation_type.as_deref(), Some("performMaintenance"));
    let got = emu.workload_interruptions();
    assert_eq!(
        (
            got[0].step_at_interruption,
            got[0].committed_step,
            got[0].steps_lost
        ),
        (249, 249, 0)
    );
    assert_eq!(emu.call_count("compute", "instances.setMetadata"), 2);
    emu.clock().advance(secs(600));
    assert!(notice(&c, "vm-2").await.is_none());
}

#[tokio::test]
async fn simulate_maintenance_event_starts_unscheduled_maintenance_now() {
    let emu = emulator().await;
    let c = running_vm(&emu, "vm-3").await;
    let sim = c
        .simulate_maintenance_event()
        .set_project("p")
        .set_zone(ZONE)
        .set_instance("vm-3");
    sim.send().await.unwrap();
    let n = notice(&c, "vm-3").await.expect("notice");
    assert_eq!(n.r#type, Some(upcoming_maintenance::Type::Unscheduled));
    assert_eq!(
        n.maintenance_status,
        Some(upcoming_maintenance::MaintenanceStatus::Ongoing)
    );
    emu.clock().advance(secs(300));
    assert!(notice(&c, "vm-3").await.is_none());
    assert_eq!(emu.call_count("compute", "instances.simulateMaintenanceEvent"), 1);
}

#[tokio::test]
async fn spot_preemption_records_the_steps_lost() {
    let emu = emulator().await;
    let c: Instances = Instances::builder()
        .with_endpoint(emu.url())
        .with_credentials(Anonymous::new().build())
        .build()
        .await
        .unwrap();
    // At 130 s of training: step 108, committed 100.
    let spot = Instance::new()
        .set_name("vm-4")
        .set_machine_type(format!("zones/{ZONE}/machineTypes/ct6e-standard-4t"))
        .set_metadata(items(None))
        .set_scheduling(
            google_cloud_compute_v1::model::Scheduling::new()
                .set_provisioning_model(google_cloud_compute_v1::model::scheduling::ProvisioningModel::Spot),
        );
    c.insert()
        .set_project("p")
        .set_zone(ZONE)
        .set_body(spot)
        .send()
        .await
        .unwrap();
    emu.clock().advance(secs(90 + 130));
    emu.preempt_instance("vm-4").unwrap();
    let got = emu.workload_interruptions();
    let last = got.last().unwrap();
    assert_eq!(
        (last.cause, last.step_at_interruption, last.committed_step),
        (Cause::Preemption, 108, 100)
    );
}
