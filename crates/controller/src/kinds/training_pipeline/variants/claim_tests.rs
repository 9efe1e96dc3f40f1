use k8s_openapi::jiff::Timestamp;

use super::*;

fn claim(name: &str, at: i64, model: &str) -> Claim {
    Claim {
        uid: format!("uid-{name}"),
        namespace: "team-a".into(),
        name: name.into(),
        created: Some(Time(Timestamp::from_second(at).unwrap())),
        live: true,
        started: false,
        suspended: false,
        dirs: [
            ("modelDir", model.into()),
            ("checkpointDir", format!("{model}/checkpoints")),
        ],
    }
}

#[test]
fn nesting_needs_a_slash_boundary() {
    assert!(nested("gs://b/m", "gs://b/m"));
    assert!(nested("gs://b/m", "gs://b/m/checkpoints"));
    assert!(nested("gs://b/m/checkpoints", "gs://b/m"));
    assert!(!nested("gs://b/m", "gs://b/m2"));
    assert!(!nested("gs://b/m2/x", "gs://b/m"));
}

#[test]
fn a_new_pipeline_waits_for_an_older_or_started_one_writing_its_directory() {
    let old = claim("old", 100, "gs://b/m");
    let new = claim("new", 200, "gs://b/m");
    let others = [old.clone(), new.clone()];
    assert_eq!(blocker(&new, &others).map(|c| c.name.as_str()), Some("old"));
    assert_eq!(blocker(&old, &others), None, "the older goes first");
    let started_new = Claim {
        started: true,
        ..new.clone()
    };
    assert_eq!(
        blocker(&old, &[started_new]).map(|c| c.name.as_str()),
        Some("new"),
        "a started pipeline keeps its directories whatever its age"
    );
}

#[test]
fn the_same_uid_finished_or_elsewhere_never_blocks() {
    let me = claim("me", 200, "gs://b/m");
    let done = Claim {
        live: false,
        ..claim("done", 100, "gs://b/m")
    };
    let elsewhere = claim("other", 100, "gs://b/other");
    assert_eq!(blocker(&me, &[me.clone(), done, elsewhere]), None);
    let started = Claim {
        started: true,
        ..me.clone()
    };
    assert_eq!(
        blocker(&started, &[claim("old", 1, "gs://b/m")]),
        None,
        "only a pipeline that has not started waits"
    );
}

#[test]
fn the_checkpoint_directory_of_one_in_the_model_directory_of_another_collides() {
    let mut me = claim("me", 200, "gs://b/m2");
    me.dirs[1].1 = "gs://b/m/ckpt".into();
    let old = claim("old", 100, "gs://b/m");
    assert_eq!(
        overlap(&me, &old),
        Some(("checkpointDir", "gs://b/m/ckpt", "modelDir"))
    );
    assert!(blocker(&me, &[old]).is_some());
}

#[test]
fn equal_creation_times_fall_back_to_the_name() {
    let a = claim("a", 100, "gs://b/m");
    let b = claim("b", 100, "gs://b/m");
    assert_eq!(
        blocker(&b, std::slice::from_ref(&a)).map(|c| c.name.as_str()),
        Some("a")
    );
    assert_eq!(blocker(&a, &[b]), None);
}

#[test]
fn the_message_names_a_neighbour_only_in_the_same_namespace_else_its_namespace() {
    let me = claim("me", 200, "gs://b/m");
    let old = claim("old", 100, "gs://b/m");
    let text = message(&me, &old);
    assert!(
        text.starts_with(
            "spec.artifacts.modelDir gs://b/m/ is in use by TrainingPipeline team-a/old (its modelDir)"
        ),
        "{text}"
    );
    assert!(text.contains("$(PIPELINE_NAME)"), "{text}");
    let foreign = Claim {
        namespace: "team-b".into(),
        ..old
    };
    let text = message(&me, &foreign);
    assert!(text.contains("a TrainingPipeline in namespace team-b,"), "{text}");
    assert!(!text.contains("old"), "{text}");
}

#[test]
fn a_pipeline_created_suspended_neither_waits_nor_is_waited_for() {
    let held = Claim {
        suspended: true,
        ..claim("held", 100, "gs://b/m")
    };
    let new = claim("new", 200, "gs://b/m");
    assert_eq!(
        blocker(&new, std::slice::from_ref(&held)),
        None,
        "an older one that never ran and is suspended"
    );
    assert_eq!(
        blocker(&held, &[claim("old", 1, "gs://b/m")]),
        None,
        "it creates nothing while suspended"
    );
    let resumed = Claim {
        suspended: false,
        ..held
    };
    assert_eq!(
        blocker(&resumed, &[Claim { started: true, ..new }]).map(|c| c.name.as_str()),
        Some("new"),
        "resumed before it ever ran, it waits for one that started meanwhile"
    );
}

/// A pipeline `Waiting` for this very rule (or its policy) before it ever ran has not started:
/// were it counted as started, its next pass would stop waiting and share the directory.
#[test]
fn waiting_before_any_run_is_not_started() {
    use tpu_operator_api::training_pipeline::{
        StageKind, StageName, StageState, StageStatus, TrainingPipelineStatus,
    };
    let never_ran = TrainingPipeline::new("w", Default::default());
    assert!(!started(&never_ran, Phase::Waiting));
    let mut ran = never_ran.clone();
    ran.status = Some(TrainingPipelineStatus {
        attempts: 1,
        stages: vec![StageStatus {
            name: StageName::Train,
            kind: StageKind::VertexCustomJob,
            resource_name: None,
            gcp_name: None,
            state: StageState::Queued,
            start_time: None,
            end_time: None,
            attempts: 1,
            capacity: None,
            interruptions: None,
            message: None,
            links: None,
        }],
        ..Default::default()
    });
    assert!(
        started(&ran, Phase::Waiting),
        "a run waiting for capacity has started"
    );
}
