'use strict'
// clients/node is a package a Node.js service can depend on: npm pack ships
// the library, its declarations and the generated definitions (and nothing
// of the tests); a project that installs the tarball can require it, and
// TypeScript checks a service written against it (test/types/usage.ts).

const { test } = require('node:test')
const assert = require('node:assert/strict')
const { execFileSync } = require('child_process')
const fs = require('fs')
const os = require('os')
const path = require('path')

const PKG = path.join(__dirname, '..')

function run (cmd, args, cwd) {
  try {
    return execFileSync(cmd, args, { cwd, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], timeout: 180000 })
  } catch (err) {
    throw new Error(`${cmd} ${args.join(' ')} in ${cwd}: ${err.message}\n${err.stdout}\n${err.stderr}`)
  }
}

test('the packed package installs, loads and type-checks', async t => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ivrsched-client-pack-'))
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }))

  const [packed] = JSON.parse(run('npm', ['pack', '--json', '--pack-destination', dir], PKG).replace(/^[^[]*/, ''))
  const files = packed.files.map(f => f.path).sort()
  assert.deepEqual(files, [
    'LICENSE', 'README.md', 'consume-calls.js', 'generated/ivrsched.d.ts', 'generated/ivrsched.json', 'index.d.ts',
    'index.js', 'ivrsched.js', 'package.json', 'produce.js'
  ])
  // Publishable metadata, and nothing that runs when a service installs it
  // (the generator and the .proto stay behind).
  const manifest = JSON.parse(fs.readFileSync(path.join(PKG, 'package.json'), 'utf8'))
  assert.equal(manifest.private, undefined)
  assert.equal(manifest.license, 'Apache-2.0')
  assert.ok(manifest.repository && manifest.description && manifest.engines.node, 'repository, description, engines')
  for (const hook of ['preinstall', 'install', 'postinstall', 'prepare']) {
    assert.equal(manifest.scripts[hook], undefined, `package.json runs ${hook} on install`)
  }

  const app = path.join(dir, 'app')
  fs.mkdirSync(app)
  fs.writeFileSync(path.join(app, 'package.json'), JSON.stringify({
    name: 'app', private: true, dependencies: { 'ivrsched-client': `file:../${packed.filename}` }
  }))
  // The dependencies are in npm's cache from npm ci.
  run('npm', ['install', '--prefer-offline', '--no-audit', '--no-fund', '--ignore-scripts'], app)

  const out = run('node', ['-e', `
    const c = require('ivrsched-client')
    const wire = c.encode('Command', new c.Commands().forget('u1'))
    console.log(c.decode('Command', wire).command, typeof c.FollowUps.connect, c.Topic.CALLS.name,
      process.env.KAFKAJS_NO_PARTITIONER_WARNING === undefined)
  `], app)
  assert.equal(out.trim(), 'forget function ivr-calls true')

  // usage.ts against the installed declarations; the declarations
  // themselves checked as sources (copies as .ts files), since skipLibCheck
  // skips every .d.ts: checking @types/node costs three times the rest.
  fs.copyFileSync(path.join(__dirname, 'types', 'usage.ts'), path.join(app, 'usage.ts'))
  const installed = path.join(app, 'node_modules', 'ivrsched-client')
  fs.mkdirSync(path.join(app, 'decl', 'generated'), { recursive: true })
  fs.copyFileSync(path.join(installed, 'index.d.ts'), path.join(app, 'decl', 'index.ts'))
  fs.copyFileSync(path.join(installed, 'generated', 'ivrsched.d.ts'), path.join(app, 'decl', 'generated', 'ivrsched.ts'))
  fs.writeFileSync(path.join(app, 'tsconfig.json'), JSON.stringify({
    compilerOptions: {
      strict: true, noEmit: true, module: 'node16', moduleResolution: 'node16', target: 'es2022', types: ['node'], skipLibCheck: true
    },
    files: ['usage.ts', 'decl/index.ts']
  }))
  run('node', [path.join(PKG, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', app], app)
})
