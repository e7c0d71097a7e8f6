"""doctor: what this kernel allows, feature by feature and tool by tool."""
