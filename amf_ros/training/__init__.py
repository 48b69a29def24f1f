"""Making policy checkpoints: pre-training on scripted demonstrations of a simulated suite (`amf pretrain`)."""
