//! The `PreprocessBatch` spec as a Dataproc `batches.create` request body.
//!
//! Pure mapping, no I/O. Everything the user wrote is passed through; the operator adds only its
//! identity labels and the reserved `spark.tpuoperator.outputUri` property, which tells the job
//! (and the emulator) where the declared output goes.

use std::collections::{BTreeMap, HashMap};

use tpu_operator_api::{
    duration::parse_duration,
    naming::{ObjectIdentity, object_labels},
    preprocess_batch::{BatchTemplate, ExecutionConfig, OUTPUT_PROPERTY, RuntimeConfig},
};
use tpu_operator_gcp::{
    dataproc_v1::model::{
        self as dp, Batch, batch::BatchConfig, execution_config::Network, spark_batch::Driver,
    },
    wkt,
};

/// Why a spec cannot become a batch request. Admission rules make these rare (they catch what the
/// CRD schema cannot express, such as "exactly one workload" in a flattened struct).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    #[error("spec: set exactly one of pyspark, spark, sparkSql, sparkR (found {0})")]
    WorkloadCount(usize),
    #[error("spec.spark: set exactly one of mainJarFileUri and mainClass")]
    SparkDriver,
    #[error("spec.execution.ttl: {0}")]
    Ttl(String),
}

/// Builds the `Batch` for one attempt of `template`.
pub fn batch_request(
    template: &BatchTemplate,
    identity: &ObjectIdentity,
    cluster_id: &str,
) -> Result<Batch, SpecError> {
    let labels: HashMap<String, String> = object_labels(&template.labels, identity, cluster_id)
        .into_iter()
        .collect();
    let mut batch = Batch::new().set_labels(labels).set_runtime_config(runtime_config(
        template.runtime.as_ref(),
        template.output_uri.as_deref(),
    ));
    batch.batch_config = Some(workload(template)?);
    if let Some(execution) = &template.execution {
        batch = batch.set_environment_config(
            dp::EnvironmentConfig::new().set_execution_config(execution_config(execution)?),
        );
    }
    Ok(batch)
}

fn workload(t: &BatchTemplate) -> Result<BatchConfig, SpecError> {
    let count = [
        t.pyspark.is_some(),
        t.spark.is_some(),
        t.spark_sql.is_some(),
        t.spark_r.is_some(),
    ]
    .iter()
    .filter(|set| **set)
    .count();
    if count != 1 {
        return Err(SpecError::WorkloadCount(count));
    }
    if let Some(p) = &t.pyspark {
        return Ok(BatchConfig::PysparkBatch(Box::new(
            dp::PySparkBatch::new()
                .set_main_python_file_uri(&p.main_python_file_uri)
                .set_args(p.args.clone())
                .set_python_file_uris(p.python_file_uris.clone())
                .set_jar_file_uris(p.jar_file_uris.clone())
                .set_file_uris(p.file_uris.clone())
                .set_archive_uris(p.archive_uris.clone()),
        )));
    }
    if let Some(s) = &t.spark {
        let driver = match (&s.main_jar_file_uri, &s.main_class) {
            (Some(jar), None) => Driver::MainJarFileUri(jar.clone()),
            (None, Some(class)) => Driver::MainClass(class.clone()),
            _ => return Err(SpecError::SparkDriver),
        };
        let mut spark = dp::SparkBatch::new()
            .set_args(s.args.clone())
            .set_jar_file_uris(s.jar_file_uris.clone())
            .set_file_uris(s.file_uris.clone())
            .set_archive_uris(s.archive_uris.clone());
        spark.driver = Some(driver);
        return Ok(BatchConfig::SparkBatch(Box::new(spark)));
    }
    if let Some(q) = &t.spark_sql {
        return Ok(BatchConfig::SparkSqlBatch(Box::new(
            dp::SparkSqlBatch::new()
                .set_query_file_uri(&q.query_file_uri)
                .set_query_variables(to_hash_map(&q.query_variables))
                .set_jar_file_uris(q.jar_file_uris.clone()),
        )));
    }
    let r = t.spark_r.as_ref().ok_or(SpecError::WorkloadCount(0))?;
    Ok(BatchConfig::SparkRBatch(Box::new(
        dp::SparkRBatch::new()
            .set_main_r_file_uri(&r.main_r_file_uri)
            .set_args(r.args.clone())
            .set_file_uris(r.file_uris.clone())
            .set_archive_uris(r.archive_uris.clone()),
    )))
}

fn runtime_config(runtime: Option<&RuntimeConfig>, output_uri: Option<&str>) -> dp::RuntimeConfig {
    let mut properties = runtime.map(|r| to_hash_map(&r.properties)).unwrap_or_default();
    if let Some(uri) = output_uri {
        properties.insert(OUTPUT_PROPERTY.to_string(), uri.to_string());
    }
    let mut config = dp::RuntimeConfig::new().set_properties(properties);
    if let Some(r) = runtime {
        if let Some(version) = &r.version {
            config = config.set_version(version);
        }
        if let Some(image) = &r.container_image {
            config = config.set_container_image(image);
        }
    }
    config
}

fn execution_config(e: &ExecutionConfig) -> Result<dp::ExecutionConfig, SpecError> {
    let mut config = dp::ExecutionConfig::new().set_network_tags(e.network_tags.clone());
    if let Some(sa) = &e.service_account {
        config = config.set_service_account(sa);
    }
    if let Some(key) = &e.kms_key {
        config = config.set_kms_key(key);
    }
    if let Some(bucket) = &e.staging_bucket {
        config = config.set_staging_bucket(bucket);
    }
    // Admission makes the two mutually exclusive; subnetwork wins if both slipped through.
    config.network = match (&e.subnetwork_uri, &e.network_uri) {
        (Some(subnet), _) => Some(Network::SubnetworkUri(subnet.clone())),
        (None, Some(net)) => Some(Network::NetworkUri(net.clone())),
        (None, None) => None,
    };
    if let Some(ttl) = &e.ttl {
        let parsed = parse_duration(ttl).map_err(|err| SpecError::Ttl(err.to_string()))?;
        let ttl = wkt::Duration::try_from(parsed).map_err(|err| SpecError::Ttl(err.to_string()))?;
        config = config.set_ttl(ttl);
    }
    Ok(config)
}

fn to_hash_map(m: &BTreeMap<String, String>) -> HashMap<String, String> {
    m.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tpu_operator_api::preprocess_batch::{PySparkBatch, SparkBatch, SparkSqlBatch};

    fn id() -> ObjectIdentity {
        ObjectIdentity::new("team-a", "prep", "0b5c1f9e-1111-2222-3333-444455556666")
    }

    fn pyspark() -> BatchTemplate {
        BatchTemplate {
            pyspark: Some(PySparkBatch {
                main_python_file_uri: "gs://b/scripts/prep.py".into(),
                args: vec!["gs://b/raw/".into(), "gs://b/out/".into()],
                ..Default::default()
            }),
            runtime: Some(RuntimeConfig {
                version: Some("2.2".into()),
                properties: BTreeMap::from([("spark.executor.memory".into(), "4g".into())]),
                container_image: Some("us-docker.pkg.dev/p/r/spark:1".into()),
            }),
            execution: Some(ExecutionConfig {
                service_account: Some("sa@p.iam.gserviceaccount.com".into()),
                subnetwork_uri: Some("projects/p/regions/us-central1/subnetworks/s".into()),
                network_tags: vec!["spark".into()],
                kms_key: Some("projects/p/locations/l/keyRings/r/cryptoKeys/k".into()),
                ttl: Some("2h".into()),
                staging_bucket: Some("staging-b".into()),
                ..Default::default()
            }),
            labels: BTreeMap::from([("team".into(), "ml".into())]),
            output_uri: Some("gs://b/out/".into()),
            ..Default::default()
        }
    }

    #[test]
    fn pyspark_spec_maps_every_field() {
        let batch = batch_request(&pyspark(), &id(), "c1").unwrap();
        let Some(BatchConfig::PysparkBatch(p)) = &batch.batch_config else {
            panic!("expected a PySpark batch: {batch:?}");
        };
        assert_eq!(p.main_python_file_uri, "gs://b/scripts/prep.py");
        assert_eq!(p.args, vec!["gs://b/raw/", "gs://b/out/"]);
        let runtime = batch.runtime_config.as_ref().unwrap();
        assert_eq!(runtime.version, "2.2");
        assert_eq!(runtime.container_image, "us-docker.pkg.dev/p/r/spark:1");
        assert_eq!(runtime.properties["spark.executor.memory"], "4g");
        assert_eq!(runtime.properties[OUTPUT_PROPERTY], "gs://b/out/");
        let exec = batch
            .environment_config
            .as_ref()
            .and_then(|e| e.execution_config.as_ref())
            .unwrap();
        assert_eq!(exec.service_account, "sa@p.iam.gserviceaccount.com");
        assert_eq!(exec.network_tags, vec!["spark"]);
        assert_eq!(exec.kms_key, "projects/p/locations/l/keyRings/r/cryptoKeys/k");
        assert_eq!(exec.staging_bucket, "staging-b");
        assert_eq!(exec.ttl.as_ref().unwrap().seconds(), 7200);
        assert_eq!(
            exec.network,
            Some(Network::SubnetworkUri(
                "projects/p/regions/us-central1/subnetworks/s".into()
            ))
        );
        assert_eq!(batch.labels["team"], "ml");
        assert_eq!(batch.labels["managed-by"], "tpu-operator");
        assert_eq!(batch.labels["tpu-operator-uid"], id().uid);
        assert_eq!(batch.labels["tpu-operator-cluster"], "c1");
    }

    #[test]
    fn spark_sql_and_spark_workloads() {
        let sql = BatchTemplate {
            spark_sql: Some(SparkSqlBatch {
                query_file_uri: "gs://b/q.sql".into(),
                query_variables: BTreeMap::from([("day".into(), "1".into())]),
                ..Default::default()
            }),
            ..Default::default()
        };
        let batch = batch_request(&sql, &id(), "c1").unwrap();
        let Some(BatchConfig::SparkSqlBatch(q)) = &batch.batch_config else {
            panic!("expected a Spark SQL batch");
        };
        assert_eq!(q.query_variables["day"], "1");
        // No output declared: no reserved property.
        assert!(
            !batch
                .runtime_config
                .unwrap()
                .properties
                .contains_key(OUTPUT_PROPERTY)
        );
        assert!(batch.environment_config.is_none());

        let class = BatchTemplate {
            spark: Some(SparkBatch {
                main_class: Some("org.example.Prep".into()),
                jar_file_uris: vec!["gs://b/prep.jar".into()],
                ..Default::default()
            }),
            execution: Some(ExecutionConfig {
                network_uri: Some("default".into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let batch = batch_request(&class, &id(), "c1").unwrap();
        let Some(BatchConfig::SparkBatch(s)) = &batch.batch_config else {
            panic!("expected a Spark batch");
        };
        assert_eq!(s.driver, Some(Driver::MainClass("org.example.Prep".into())));
        let exec = batch.environment_config.unwrap().execution_config.unwrap();
        assert_eq!(exec.network, Some(Network::NetworkUri("default".into())));
    }

    #[test]
    fn refuses_ambiguous_workloads() {
        assert_eq!(
            batch_request(&BatchTemplate::default(), &id(), "c").unwrap_err(),
            SpecError::WorkloadCount(0)
        );
        let mut two = pyspark();
        two.spark_sql = Some(SparkSqlBatch::default());
        assert_eq!(
            batch_request(&two, &id(), "c").unwrap_err(),
            SpecError::WorkloadCount(2)
        );
        let both = BatchTemplate {
            spark: Some(SparkBatch {
                main_class: Some("A".into()),
                main_jar_file_uri: Some("gs://b/a.jar".into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(
            batch_request(&both, &id(), "c").unwrap_err(),
            SpecError::SparkDriver
        );
    }
}
