-- Argo CD health check for plateau.dev PlateauNode and PlateauTopic.
-- Install it for both kinds under resource.customizations in argocd-cm
-- (docs/operator.md shows how). It reads only what the operator writes:
-- observedGeneration and the Ready, Progressing and Degraded conditions.
local hs = {}
if obj.status == nil or obj.status.conditions == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the plateau operator to reconcile"
  return hs
end
local generation = obj.metadata.generation
local observed = obj.status.observedGeneration
if generation ~= nil and (observed == nil or observed < generation) then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to observe generation " .. tostring(generation)
  return hs
end
local ready, progressing, degraded
for _, c in ipairs(obj.status.conditions) do
  if c.type == "Ready" then ready = c end
  if c.type == "Progressing" then progressing = c end
  if c.type == "Degraded" then degraded = c end
end
if degraded ~= nil and degraded.status == "True" then
  hs.status = "Degraded"
  hs.message = degraded.reason .. ": " .. (degraded.message or "")
  return hs
end
if ready ~= nil and ready.status == "True" then
  if progressing ~= nil and progressing.status == "True" then
    hs.status = "Progressing"
    hs.message = progressing.reason .. ": " .. (progressing.message or "")
    return hs
  end
  hs.status = "Healthy"
  hs.message = ready.message or ""
  return hs
end
if ready == nil then
  hs.status = "Progressing"
  hs.message = "No Ready condition yet"
  return hs
end
-- Ready is False: a node still starting is on its way; anything else needs a person
-- (Invalid, OverBudget, NodeNotFound, ResourceConflict, Unauthorized) or a node
-- that came back (NodeUnreachable).
if ready.reason == "NotReady" then
  hs.status = "Progressing"
else
  hs.status = "Degraded"
end
hs.message = (ready.reason or "") .. ": " .. (ready.message or "")
return hs
