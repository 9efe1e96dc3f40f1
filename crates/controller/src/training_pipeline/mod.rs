//! The TrainingPipeline controller (in progress).
