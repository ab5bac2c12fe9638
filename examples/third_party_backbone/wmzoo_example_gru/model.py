"""A small deterministic recurrent world model: PlaNet's deterministic path (Hafner et al., 2019,
the "RNN" of its figure 2) or a "World Models"-style predictor (Ha & Schmidhuber, 2018) without
the mixture density, trained on pixels with DreamerV3's image, reward and continue losses.

    e_t     = encoder(x_t)                                   embedding of the image x_t
    h_t     = GRU(h_{t-1}, MLP([e_{t-1}, a_{t-1}]))          zero state and action where is_first
    ê_{t+1} = predictor(h_{t+1})                             imagination's stand-in for e_{t+1}
    x̂_t = decoder([h_t, e_t]),  r̂_t, ĉ_t = heads([h_{t+1}, e_{t+1}])

A state is ``{"h": h_t [B, deter], "e": e_t [B, embed]}``: the GRU state and the embedding the
model sees at step t (encoded while filtering, predicted while imagining). There is no latent
sampling, so filtering and imagination are deterministic.
"""

from __future__ import annotations

import torch
from pydantic import Field
from torch import Tensor, nn

from wmzoo.interfaces import (
    Batch, EnvInfo, State, Step, TrainOutput, WorldModel, detach_state, flatten_state, reset_state,
)
from wmzoo.nn import (
    MLP,
    ConvDecoder,
    ConvEncoder,
    NormedLinear,
    RewardContinueHeads,
    encode_action,
    masked_mean,
    recon_loss,
    start_conts,
)
from wmzoo.specs import OptimSpec, WorldModelSpec


class GRUSpec(WorldModelSpec):
    """Hyperparameters of the GRU world model."""

    deter: int = Field(512, ge=1, le=16384, description="h_t: GRU state size")
    hidden: int = Field(512, ge=1, le=16384, description="units of the GRU input and every MLP layer")
    mlp_layers: int = Field(2, ge=0, le=16, description="hidden layers of the predictor and the heads")
    cnn_depth: int = Field(32, ge=1, le=1024, description="channels of the first CNN stage (x2 per stage)")
    cnn_stages: int = Field(4, ge=1, le=8, description="stride-2 CNN stages (size divisible by 2**stages)")
    recon_scale: float = Field(1.0, ge=0, le=1000, description="weight of the image loss")
    pred_scale: float = Field(1.0, ge=0, le=1000, description="weight of the embedding-prediction loss")
    reward_scale: float = Field(1.0, ge=0, le=1000, description="weight of the reward loss")
    cont_scale: float = Field(1.0, ge=0, le=1000, description="weight of the continue loss")
    reward_bins: int = Field(255, ge=2, le=4096, description="two-hot bins of the reward head")
    optim: OptimSpec = Field(default_factory=OptimSpec, description="world-model optimizer")


class GRUWorldModel(WorldModel):
    """Encoder, GRU, embedding predictor, image decoder, reward (two-hot) and continue heads."""

    stateful_training = False  # every training segment starts from the zero state

    def __init__(self, spec: GRUSpec, env: EnvInfo) -> None:
        super().__init__()
        self.spec, self.env = spec, env
        self.encoder = ConvEncoder(env.obs_shape, spec.cnn_depth, spec.cnn_stages)
        embed = self.encoder.out_dim
        self.inp = NormedLinear(embed + env.num_actions, spec.hidden)
        self.gru = nn.GRUCell(spec.hidden, spec.deter)
        self.predictor = MLP(spec.deter, embed, spec.hidden, spec.mlp_layers)
        feat = spec.deter + embed
        self.feature_shape = (feat,)
        self.decoder = ConvDecoder(env.obs_shape, feat, spec.cnn_depth, spec.cnn_stages)
        self.heads = RewardContinueHeads(feat, spec.hidden, spec.mlp_layers, spec.reward_bins)

    def _action(self, action: Tensor) -> Tensor:
        return encode_action(action, self.env)

    def components(self) -> dict[str, tuple[list[nn.Parameter], OptimSpec]]:
        return {"model": (list(self.parameters()), self.spec.optim)}

    def initial_state(self, batch_size: int) -> State:
        ref = self.gru.weight_hh
        zeros = lambda n: torch.zeros(batch_size, n, device=ref.device, dtype=ref.dtype)  # noqa: E731
        return {"h": zeros(self.spec.deter), "e": zeros(self.encoder.out_dim)}

    def features(self, state: State) -> Tensor:
        return torch.cat([state["h"], state["e"]], -1)

    def decode(self, state: State) -> Tensor:
        return (self.decoder(self.features(state)).clamp(0, 1) * 255).round().to(torch.uint8)

    def observe_step(self, state: State, obs: Tensor, prev_action: Tensor, is_first: Tensor) -> State:
        """``h_t = GRU(h_{t-1}, [e_{t-1}, a_{t-1}])`` from zeros where ``is_first``; ``e_t = enc(x_t)``."""
        state = reset_state(state, self.initial_state(obs.shape[0]), is_first)
        action = self._action(prev_action) * (~is_first).unsqueeze(-1).float()
        h = self.gru(self.inp(torch.cat([state["e"], action], -1)), state["h"])
        return {"h": h, "e": self.encoder(obs)}

    def imagine_step(self, state: State, action: Tensor) -> Step:
        """``h_{t+1} = GRU(h_t, [e_t, a_t])`` and the predicted embedding ``e_{t+1}``."""
        h = self.gru(self.inp(torch.cat([state["e"], self._action(action)], -1)), state["h"])
        new = {"h": h, "e": self.predictor(h)}
        feat = self.features(new)
        reward, cont = self.heads.predict(feat)
        return Step(state=new, reward=reward, cont=cont, features=feat)

    def loss(self, batch: Batch, carry: State | None = None) -> TrainOutput:
        """Image, embedding-prediction, reward and continue losses on a batch of sequences.

        ``carry`` (the state before ``t = 0``) is accepted for completeness; the trainer passes
        none since ``stateful_training`` is false.
        """
        spec, (B, T) = self.spec, batch.shape
        e = self.encoder(batch.obs)  # [B, T, E]
        keep = (~batch.is_first).unsqueeze(-1).float()
        state = self.initial_state(B) if carry is None else carry
        # the input at t is [e_{t-1}, a_{t-1}] (the carry's e and no action at t = 0), zero where is_first
        prev_e = torch.cat([state["e"].unsqueeze(1), e[:, :-1]], 1)
        action = self._action(batch.action)
        prev_a = torch.cat([torch.zeros_like(action[:, :1]), action[:, :-1]], 1)
        x = self.inp(torch.cat([prev_e, prev_a], -1) * keep)  # all steps at once; only the GRU loops
        h, hs = state["h"], []
        for t in range(T):
            h = self.gru(x[:, t], h * keep[:, t])
            hs.append(h)
        post = {"h": torch.stack(hs, 1), "e": e}
        feat = self.features(post)

        # reward[t], terminal[t] result from action[t]: predicted from the state at t + 1, and
        # masked where t + 1 starts a new episode; likewise the embedding prediction of e_{t+1}
        mask = ~batch.is_first[:, 1:]
        image = recon_loss(self.decoder(feat), batch.obs)
        pred_err = (self.predictor(post["h"][:, 1:]) - e[:, 1:].detach()).square().sum(-1)
        pred = masked_mean(pred_err, mask)
        reward, cont, head_metrics = self.heads.loss(feat, batch)
        total = (spec.recon_scale * image + spec.pred_scale * pred
                 + spec.reward_scale * reward + spec.cont_scale * cont)

        # the loss terms require grad: log detached floats (.item()), not the tensors
        metrics = {
            "model": total, "recon": image, "pred": pred, "reward": reward, "cont": cont,
            **head_metrics,
        }
        return TrainOutput(
            losses={"model": total},
            metrics={key: value.detach().item() for key, value in metrics.items()},
            start=flatten_state(detach_state(post)),
            start_cont=start_conts(batch).reshape(-1),  # 0 where obs[t] ends its episode
        )


PRESETS: dict[str, GRUSpec] = {
    # tests and CPU minutes (sizes as rssm's tiny)
    "tiny": GRUSpec(batch_size=4, seq_len=16, deter=64, hidden=64, mlp_layers=1, cnn_depth=8,
                    optim=OptimSpec(lr=3e-4)),
    # longer CPU runs (sizes as rssm's small)
    "small": GRUSpec(batch_size=8, seq_len=32, deter=256, hidden=256, mlp_layers=1, cnn_depth=8,
                     optim=OptimSpec(lr=3e-4)),
    # no paper: sizes comparable to DreamerV3-S (GRU 512, MLPs 2 x 512, CNN depth 32, batch 16 x 64)
    "paper": GRUSpec(batch_size=16, seq_len=64, deter=512, hidden=512, mlp_layers=2, cnn_depth=32,
                     optim=OptimSpec(lr=1e-4, eps=1e-8, clip=1000.0)),
}
