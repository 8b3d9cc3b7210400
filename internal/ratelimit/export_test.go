package ratelimit

// RollbackScriptHash names the rollback script in a hook, for tests that
// make its calls fail.
var RollbackScriptHash = rollbackScript.Hash()
