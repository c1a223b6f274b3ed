"""The executor room: devices and meshes (mesh), the training data (data) and the sharded train
step (step), which runs any layout with the techniques of parex.parallel."""
