"""Reading config files (`config.toml`): the user's and a workspace's project file."""
