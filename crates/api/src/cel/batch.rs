//! Rules of a Dataproc batch workload (shared by `PreprocessBatch.spec` and a pipeline's
//! `preprocess`) and what `PreprocessBatch` keeps immutable.

use super::{PlacedRule, Rule, immutable_here, immutable_optional, join, place};

/// Shape rules of a Dataproc batch workload placed at `prefix` — shared by `PreprocessBatch.spec`
/// (flattened) and `TrainingPipeline.spec.preprocess`.
pub(super) fn batch_shape_rules(prefix: &str) -> Vec<PlacedRule> {
    let mut out = place(
        prefix,
        vec![Rule::new(
            "(has(self.pyspark) ? 1 : 0) + (has(self.spark) ? 1 : 0) + (has(self.sparkSql) ? 1 : 0) + (has(self.sparkR) ? 1 : 0) == 1",
            "set exactly one of pyspark, spark, sparkSql and sparkR",
        )
        .message_expression(
            // Static strings only: a real kube-apiserver estimates `string(int)` as unbounded, and
            // concatenating it put the whole CRD over the CEL cost budget (it refused the CRD).
            "(has(self.pyspark) ? 1 : 0) + (has(self.spark) ? 1 : 0) + (has(self.sparkSql) ? 1 : 0) + (has(self.sparkR) ? 1 : 0) == 0 ? 'set one of pyspark, spark, sparkSql and sparkR: none is set' : 'pyspark, spark, sparkSql and sparkR are mutually exclusive: set only one of them'",
        )],
    );
    out.extend(place(
        &join(prefix, "spark"),
        vec![
            Rule::new(
                "has(self.mainJarFileUri) != has(self.mainClass)",
                "set exactly one of spark.mainJarFileUri and spark.mainClass",
            )
            .at(".mainClass"),
        ],
    ));
    out.extend(place(
        &join(prefix, "execution"),
        vec![
            Rule::new(
                "!(has(self.subnetworkUri) && has(self.networkUri))",
                "subnetworkUri and networkUri are mutually exclusive (Dataproc takes one): set one",
            )
            .at(".networkUri"),
        ],
    ));
    out.extend(place(
        &join(prefix, "runtime"),
        vec![Rule::new(
            "!has(self.properties) || !self.properties.exists(k, k.startsWith('spark.tpuoperator.'))",
            "Spark properties 'spark.tpuoperator.*' are reserved: the operator sets spark.tpuoperator.outputUri from outputUri",
        )
        .at(".properties")],
    ));
    out
}

/// Rules of `PreprocessBatch`.
pub fn preprocess_batch_rules() -> Vec<PlacedRule> {
    const KIND: &str = "PreprocessBatch";
    let mut out = batch_shape_rules("spec");
    out.extend(place("spec.region", vec![immutable_here(KIND, "region")]));
    out.extend(place(
        "spec",
        [
            "project",
            "pyspark",
            "spark",
            "sparkSql",
            "sparkR",
            "runtime",
            "execution",
            "labels",
            "inputs",
            "outputUri",
            "maxRetries",
        ]
        .iter()
        .map(|f| immutable_optional(KIND, f))
        .collect(),
    ));
    out
}
