"""TFRecord shards: TensorFlow's CRC-framed records, each a tf.train.Example protobuf."""
