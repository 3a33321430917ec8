// pfc for VS Code: starts `pfc lsp` (stdio) for .pf files through vscode-languageclient.
// Everything (diagnostics, hover, completion, formatting, semantic tokens) comes from the
// server; this file only starts it and forwards the `pfc.*` settings.
"use strict";

const vscode = require("vscode");
const { LanguageClient } = require("vscode-languageclient/node");

let client;

async function activate(context) {
  const config = vscode.workspace.getConfiguration("pfc");
  // No `transport`: the client then talks over the process's stdin/stdout without
  // adding `--stdio` (which `pfc lsp` would accept anyway).
  const serverOptions = { command: config.get("path", "pfc"), args: ["lsp"] };
  const clientOptions = {
    documentSelector: [
      { scheme: "file", language: "pfc" },
      { scheme: "untitled", language: "pfc" },
    ],
    // The targets at start-up; later changes of `pfc.*` are sent as
    // workspace/didChangeConfiguration { settings: { pfc: {...} } }.
    initializationOptions: { pfc: { targets: config.get("targets", []) } },
    synchronize: { configurationSection: "pfc" },
  };
  client = new LanguageClient("pfc", "pfc language server", serverOptions, clientOptions);
  await client.start();
  context.subscriptions.push(client);
  context.subscriptions.push(
    vscode.workspace.onDidChangeConfiguration(async (event) => {
      if (event.affectsConfiguration("pfc.path") && client) {
        await client.restart();
      }
    }),
  );
}

function deactivate() {
  return client ? client.stop() : undefined;
}

module.exports = { activate, deactivate };
