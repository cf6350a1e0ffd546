"""Playing whole games with a policy: the evaluate command's library and the eval worker."""
