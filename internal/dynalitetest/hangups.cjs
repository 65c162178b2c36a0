// Preloaded into dynalite (node -r hangups.cjs node_modules/.bin/dynalite ...)
// by dynalitetest and the bench scripts. dynalite 4.0.0 throws from its
// request's 'error' listener (index.js, httpHandler), so a client that hangs
// up while dynalite reads its body ("aborted", ECONNRESET) kills the whole
// server: a test that cuts the network in the middle of a call then loses
// its DynamoDB for good. DynamoDB itself drops such a client and serves the
// rest; with this hook dynalite does too. Any other uncaught error still
// ends the process, with its stack, as before.
'use strict'
process.on('uncaughtException', (err) => {
  if (err && err.code === 'ECONNRESET' && err.message === 'aborted') {
    console.error('dynalite: a client hung up mid-request (ignored)')
    return
  }
  console.error(err)
  process.exit(1)
})
